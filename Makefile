# The two entry points the README gives. Each installs what it needs first (idempotent).
.PHONY: demo test lint bench install install-qemu

install:
	bash ops/install.sh

# the tests also cover the qemu hypervisor mode (real libvirtd + QEMU guests)
install-qemu:
	bash ops/install.sh --qemu

demo: install
	.venv/bin/virtstream up --demo --nodes 2

test: install-qemu
	.venv/bin/ruff check .
	.venv/bin/mypy .
	.venv/bin/pytest -q -p no:cacheprovider

bench: install
	.venv/bin/python -m bench.bench_backbone
