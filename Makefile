# The two entry points the README gives. Each installs what it needs first (idempotent).
.PHONY: demo test lint bench install

install:
	bash ops/install.sh

demo: install
	.venv/bin/virtstream up --demo

test: install
	.venv/bin/ruff check .
	.venv/bin/mypy .
	.venv/bin/pytest -q -p no:cacheprovider

bench: install
	.venv/bin/python -m bench.bench_backbone
