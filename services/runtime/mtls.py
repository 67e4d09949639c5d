"""Mutual TLS between the api and the nodes' console servers, as KubeVirt has it between
virt-api and virt-handler (pkg/util/tls): both certificates are signed by the cluster's CA,
the server asks for and verifies the client's, and each side checks the other's Common
Name: the console server accepts only `kubevirt.io:system:client:virt-handler` (the api's
client certificate), the api talks only to `kubevirt.io:system:node:virt-handler`. Host
names are not checked (a node's address is whatever it registered); the CA and the name
are. OpenSSL checks the extended key usage of the peer (serverAuth, clientAuth), so a
client-only certificate cannot serve and the node's server-only one cannot dial."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SERVER_CN = "kubevirt.io:system:node:virt-handler"
CLIENT_CN = "kubevirt.io:system:client:virt-handler"


class PeerRefused(Exception):
    """The peer's certificate is valid but not the one this channel expects."""


@dataclass(frozen=True)
class TlsFiles:
    """A certificate, its key, and the CA the peer's certificate must be signed by."""

    cert: Path
    key: Path
    ca: Path

    def server_context(self) -> ssl.SSLContext:
        """Serves with `cert`; a client must present a certificate signed by `ca`."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self.cert, self.key)
        ctx.load_verify_locations(cafile=self.ca)
        ctx.verify_mode = ssl.CERT_REQUIRED
        return ctx

    def client_context(self) -> ssl.SSLContext:
        """Dials with `cert` as the client certificate; the server's must be signed by `ca`
        (its name is checked with `check_peer`, not its host name)."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(cafile=self.ca)
        ctx.load_cert_chain(self.cert, self.key)
        return ctx


def common_name(peercert: dict[str, Any] | None) -> str:
    """The Common Name of a verified peer certificate (ssl's getpeercert() form)."""
    for rdn in (peercert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return ""


def check_peer(peercert: dict[str, Any] | None, expected: str) -> None:
    """KubeVirt's words when the verified peer is not the expected component."""
    name = common_name(peercert)
    if name != expected:
        raise PeerRefused(f"common name is invalid, expected {expected}, but got {name}")
