"""Who may read a service's /metrics, and over what: bearer tokens from a file (one per
line; `virtstream up` writes Prometheus's) and a server certificate for HTTPS.

The API server guards its /metrics by RBAC (`get` on the non-resource URL, Kubernetes'
`system:monitoring`); the controller and the handlers have no RBAC of their own, so they
accept the tokens of the file, compared by SHA-256 as the api compares its tokens.
/healthz and /readyz stay open, as the API server's are to anyone."""

from __future__ import annotations

import argparse
import hashlib
import hmac
import ssl
from dataclasses import dataclass, field
from pathlib import Path


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


@dataclass(frozen=True)
class MetricsAccess:
    """Without a token file /metrics is open (a bare service started by hand); `up` gives
    one unless `--insecure`."""

    token_file: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    _digests: tuple[bytes, ...] = field(default=(), compare=False, repr=False)

    @classmethod
    def load(
        cls, token_file: Path | None, tls_cert: Path | None = None, tls_key: Path | None = None
    ) -> MetricsAccess:
        """Reads the token file now: a missing or empty one is an error said in one line."""
        digests: tuple[bytes, ...] = ()
        if token_file is not None:
            try:
                lines = token_file.read_text().split()
            except OSError as e:
                what = f"cannot read the metrics token file {token_file}: {e.strerror}"
                raise ValueError(what) from None
            digests = tuple(_digest(t) for t in lines if t)
            if not digests:
                raise ValueError(f"the metrics token file {token_file} holds no token")
        return cls(token_file, tls_cert, tls_key, digests)

    @property
    def guarded(self) -> bool:
        return self.token_file is not None

    def allows(self, authorization: str) -> bool:
        if not self.guarded:
            return True
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return False
        wanted = _digest(token.strip())
        return any(hmac.compare_digest(wanted, d) for d in self._digests)

    def ssl_context(self) -> ssl.SSLContext | None:
        if self.tls_cert is None or self.tls_key is None:
            return None
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self.tls_cert, self.tls_key)
        return ctx


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--metrics-token-file",
        type=Path,
        help="bearer tokens (one per line) allowed to read /metrics; without it /metrics is open",
    )
    parser.add_argument("--metrics-tls-cert", type=Path, help="serve /metrics over HTTPS")
    parser.add_argument("--metrics-tls-key", type=Path, help="the certificate's key")


def from_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> MetricsAccess:
    if bool(args.metrics_tls_cert) != bool(args.metrics_tls_key):
        parser.error("--metrics-tls-cert and --metrics-tls-key go together")
    try:
        cert, key = args.metrics_tls_cert, args.metrics_tls_key
        return MetricsAccess.load(args.metrics_token_file, cert, key)
    except ValueError as e:
        parser.exit(1, f"error: {e}\n")
