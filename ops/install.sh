#!/usr/bin/env bash
# Idempotent installer: Debian packages (as root, only when missing), a virtualenv in .venv,
# and the project with its dev dependencies. Safe to run on every `make` invocation.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
for pkg in libvirt-dev pkg-config libvirt0 ${VIRTSTREAM_EXTRA_APT:-}; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need_apt+=("$pkg")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "missing Debian packages: ${need_apt[*]}; run: sudo apt-get install -y ${need_apt[*]}" >&2
    exit 1
  fi
  echo "installing Debian packages: ${need_apt[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.installed-$(sha1sum pyproject.toml | cut -c1-12)
if [ ! -f "$stamp" ]; then
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e '.[dev]'
  rm -f .venv/.installed-*
  touch "$stamp"
fi
