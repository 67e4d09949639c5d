#!/usr/bin/env bash
# Idempotent installer: Debian packages (as root, only when missing), a virtualenv in .venv,
# and the project with its dev dependencies. Safe to run on every `make` invocation.
#   --qemu (or VIRTSTREAM_QEMU=1): also the packages of the `qemu` hypervisor mode (real
#   libvirtd + QEMU guests; genisoimage renders cloud-init NoCloud seed ISOs), and the guest
#   image built from Debian packages into the image dir (once; ops/guest_images.py).
set -euo pipefail
cd "$(dirname "$0")/.."

qemu_apt=""
for arg in "$@"; do
  case "$arg" in
    --qemu) VIRTSTREAM_QEMU=1 ;;
    *) echo "usage: $0 [--qemu]" >&2; exit 2 ;;
  esac
done
if [ "${VIRTSTREAM_QEMU:-0}" = "1" ]; then
  # dnsmasq-base (+ dnsmasq-utils' dhcp_release): the pod network's DHCP server per node
  qemu_apt="qemu-system-x86 libvirt-daemon libvirt-daemon-driver-qemu qemu-utils genisoimage"
  qemu_apt+=" dnsmasq-base dnsmasq-utils"
fi

missing() {
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || echo "$pkg"
  done
}
# prometheus (with promtool): the observability tests and `virtstream up --metrics`; its
# recommended node exporter is not wanted. chromium: the web console's browser tests and
# benchmark drive it headless through Playwright (no browser download). The qemu stack is
# installed with its recommendations, the set verified on this machine kind (see
# ../shared/DESIGN.md).
mapfile -t lean < <(missing libvirt-dev pkg-config libvirt0 prometheus chromium ${VIRTSTREAM_EXTRA_APT:-})
mapfile -t full < <(missing $qemu_apt)
if [ $((${#lean[@]} + ${#full[@]})) -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "missing Debian packages: ${lean[*]} ${full[*]}; run: sudo apt-get install -y ${lean[*]} ${full[*]}" >&2
    exit 1
  fi
  echo "installing Debian packages: ${lean[*]} ${full[*]}"
  apt-get update -qq
  export DEBIAN_FRONTEND=noninteractive
  if [ ${#lean[@]} -gt 0 ]; then
    apt-get install -y -qq --no-install-recommends "${lean[@]}" >/dev/null
  fi
  if [ ${#full[@]} -gt 0 ]; then
    apt-get install -y -qq "${full[@]}" >/dev/null
  fi
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
# the sources' bytecode now: an editable install compiles none of it, and a service
# started where Python may not write it (PYTHONDONTWRITEBYTECODE) would compile every
# module again on each start
.venv/bin/python -m compileall -q -j 0 cli client core events eventstore kinds ops \
  projections readside services >/dev/null
if [ "${VIRTSTREAM_QEMU:-0}" = "1" ]; then
  # a no-op when the image dir holds a build of the current recipe
  .venv/bin/python -m ops.guest_images
fi
