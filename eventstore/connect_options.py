"""Connection settings for NATS (credentials and TLS), apart from the connecting itself:
the HTTP client reads them to find the cluster's NATS user without loading nats-py.

`ConnectOptions` is the one place every service and command takes its connection settings
from: flags (eventstore/connection.py) or the environment (`VIRTSTREAM_NATS_USER` and
`_PASSWORD`, which `virtstream up` gives each service; `VIRTSTREAM_NATS_CREDS`, `_TLS_CA`,
`_TLS_CERT`, `_TLS_KEY` for a real install)."""

from __future__ import annotations

import os
import ssl
from typing import Any

import msgspec

ENV = {
    "creds": "VIRTSTREAM_NATS_CREDS",
    "tls_ca": "VIRTSTREAM_NATS_TLS_CA",
    "tls_cert": "VIRTSTREAM_NATS_TLS_CERT",
    "tls_key": "VIRTSTREAM_NATS_TLS_KEY",
    "user": "VIRTSTREAM_NATS_USER",
    "password": "VIRTSTREAM_NATS_PASSWORD",
}
FILES = ("creds", "tls_ca", "tls_cert", "tls_key")  # also flags; a password is not one


class ConnectOptions(msgspec.Struct, frozen=True, kw_only=True):
    """Passed through to nats-py: a user and password (`virtstream up` makes one per
    service, ops/nats_auth.py) with its own inbox prefix (no other user reads its replies),
    or a `.creds` file (user JWT and NKey seed); TLS with a CA to verify the servers and a
    client certificate and key for mutual TLS."""

    creds: str = ""
    tls_ca: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    user: str = ""
    password: str = ""

    @classmethod
    def from_env(cls) -> ConnectOptions:
        return cls(**{field: os.environ.get(var, "") for field, var in ENV.items()})

    @property
    def given(self) -> bool:
        return any(getattr(self, field) for field in ENV)

    def env(self) -> dict[str, str]:
        """The environment that hands these options to a process."""
        return {var: value for field, var in ENV.items() if (value := getattr(self, field))}

    def export(self) -> None:
        """Into the environment: the processes this one starts connect the same way."""
        os.environ.update(self.env())

    def nats_kwargs(self) -> dict[str, Any]:
        """nats-py's keyword arguments; a file named here that is not there raises
        FileNotFoundError naming the option (not a connection error much later)."""
        for field in FILES:
            path = getattr(self, field)
            if path and not os.path.isfile(path):
                flag = "--nats-" + field.replace("_", "-")
                raise FileNotFoundError(f"{flag} {path}: no such file")
        kwargs: dict[str, Any] = {}
        if self.creds:
            kwargs["user_credentials"] = self.creds
        if self.user:
            kwargs |= {"user": self.user, "password": self.password}
            kwargs["inbox_prefix"] = f"_INBOX_{self.user}"
        if self.tls_ca or self.tls_cert:
            ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.tls_ca or None)
            if self.tls_cert:
                ctx.load_cert_chain(self.tls_cert, self.tls_key or None)
            kwargs["tls"] = ctx
        return kwargs
