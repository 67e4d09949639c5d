"""The node console server's reading of a live domain XML: the serial console's pty and
the VNC port libvirt picked (autoport)."""

from __future__ import annotations

from services.handler.console_server import PATH, Endpoints, endpoints_of

LIVE = """<domain type='qemu'><devices>
  <serial type='pty'><source path='/dev/pts/7'/><target port='0'/></serial>
  <console type='pty' tty='/dev/pts/7'><source path='/dev/pts/7'/><target type='serial'/></console>
  <graphics type='vnc' port='5901' autoport='yes' listen='127.0.0.1'/>
</devices></domain>"""


def test_a_running_domain_has_its_pty_and_vnc_port() -> None:
    assert endpoints_of(LIVE) == Endpoints(pty="/dev/pts/7", vnc_port=5901)


def test_a_domain_without_them_has_neither() -> None:
    assert endpoints_of("<domain><devices/></domain>") == Endpoints(pty=None, vnc_port=None)
    unstarted = "<domain><devices><graphics type='vnc' port='-1'/></devices></domain>"
    assert endpoints_of(unstarted).vnc_port is None


def test_paths_name_namespace_vmi_and_channel() -> None:
    m = PATH.match("/v1/namespaces/ns1/virtualmachineinstances/vm-a/vnc")
    assert m is not None and (m["ns"], m["name"], m["channel"]) == ("ns1", "vm-a", "vnc")
    assert PATH.match("/v1/namespaces/ns1/virtualmachineinstances/vm-a/exec") is None
