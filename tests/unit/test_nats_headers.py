from nats.aio.client import Client

from eventstore import nats_headers

RAW = (
    b"Nats-Msg-Id: virt-controller/12/0\r\n"
    b"Nats-Expected-Last-Subject-Sequence:7\r\n"
    b"Virt-Error:  caf\xc3\xa9 failed \r\n"
    b"Bad Name: x\r\n"
    b"no colon here\r\n"
    b"\r\n"
)


def test_parses_like_nats_py_for_the_headers_we_store() -> None:
    parsed = nats_headers.parse_header_lines(RAW)
    assert parsed == nats_headers.NATS_PY_PARSER(RAW)
    assert parsed == {
        "Nats-Msg-Id": "virt-controller/12/0",
        "Nats-Expected-Last-Subject-Sequence": "7",
        "Virt-Error": "café failed",
    }


def test_installed_on_the_client() -> None:
    import eventstore.jetstream  # noqa: F401  (installs it)

    assert Client._parse_header_lines(RAW) == nats_headers.parse_header_lines(RAW)
