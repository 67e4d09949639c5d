"""Connecting to NATS: one server or a cluster, given as one URL or a comma-separated list.

Services reconnect forever (a restarted server or a cluster failover must never end a
service); one-shot commands give up at once so a user hears about it within seconds.

What a real install adds to a connection (a credentials file, TLS) is `ConnectOptions`,
the one place every service and command takes its connection settings from: flags
(`add_arguments`) or the environment (`VIRTSTREAM_NATS_CREDS`, `VIRTSTREAM_NATS_TLS_CA`,
`VIRTSTREAM_NATS_TLS_CERT`, `VIRTSTREAM_NATS_TLS_KEY`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgspec
import nats
import structlog
from nats.aio.client import Client as NATS

log = structlog.get_logger()

ENV = {
    "creds": "VIRTSTREAM_NATS_CREDS",
    "tls_ca": "VIRTSTREAM_NATS_TLS_CA",
    "tls_cert": "VIRTSTREAM_NATS_TLS_CERT",
    "tls_key": "VIRTSTREAM_NATS_TLS_KEY",
}


class ConnectOptions(msgspec.Struct, frozen=True, kw_only=True):
    """Passed through to nats-py: a `.creds` file (user JWT and NKey seed), and TLS with
    a CA to verify the servers and a client certificate and key for mutual TLS."""

    creds: str = ""
    tls_ca: str = ""
    tls_cert: str = ""
    tls_key: str = ""

    @classmethod
    def from_env(cls) -> ConnectOptions:
        return cls(**{field: os.environ.get(var, "") for field, var in ENV.items()})

    def export(self) -> None:
        """Into the environment: the processes this one starts connect the same way."""
        for field, var in ENV.items():
            if value := getattr(self, field):
                os.environ[var] = value

    def nats_kwargs(self) -> dict[str, Any]:
        """nats-py's keyword arguments; a file named here that is not there raises
        FileNotFoundError naming the option (not a connection error much later)."""
        for field in ENV:
            path = getattr(self, field)
            if path and not os.path.isfile(path):
                flag = "--nats-" + field.replace("_", "-")
                raise FileNotFoundError(f"{flag} {path}: no such file")
        kwargs: dict[str, Any] = {}
        if self.creds:
            kwargs["user_credentials"] = self.creds
        if self.tls_ca or self.tls_cert:
            ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.tls_ca or None)
            if self.tls_cert:
                ctx.load_cert_chain(self.tls_cert, self.tls_key or None)
            kwargs["tls"] = ctx
        return kwargs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`--nats-creds`, `--nats-tls-ca`, `--nats-tls-cert`, `--nats-tls-key` (defaults from
    the environment); `from_arguments` reads them back."""
    for field, var in ENV.items():
        flag = "--nats-" + field.replace("_", "-")
        parser.add_argument(flag, default=os.environ.get(var, ""), help=f"(env {var})")


def from_arguments(args: argparse.Namespace) -> ConnectOptions:
    """The options given as flags, exported so that `connect_service` (which reads the
    environment) and the processes started from here use them."""
    options = ConnectOptions(**{f: getattr(args, "nats_" + f) for f in ENV})
    options.export()
    return options


USER_ENV, PASSWORD_ENV, CA_ENV = (
    "VIRTSTREAM_NATS_USER",
    "VIRTSTREAM_NATS_PASSWORD",
    "VIRTSTREAM_NATS_CA",
)


@dataclass(frozen=True)
class NatsAuth:
    """A connection's credentials: the user and password (ops/nats_auth.py makes one user
    per service), its own inbox prefix (no other user may read its replies), and the CA a
    TLS server's certificate must chain to."""

    user: str = ""
    password: str = ""
    ca_file: str = ""
    inbox_prefix: str = ""

    @classmethod
    def from_env(cls) -> NatsAuth | None:
        """What `virtstream up` gives each service in its environment."""
        user, ca = os.environ.get(USER_ENV, ""), os.environ.get(CA_ENV, "")
        if not user and not ca:
            return None
        return cls(user, os.environ.get(PASSWORD_ENV, ""), ca, f"_INBOX_{user}" if user else "")

    def options(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.user:
            out |= {"user": self.user, "password": self.password}
        if self.inbox_prefix:
            out["inbox_prefix"] = self.inbox_prefix
        if self.ca_file:
            out["tls"] = ssl.create_default_context(cafile=self.ca_file)
        return out

    def env(self) -> dict[str, str]:
        """The environment that hands these credentials to a service."""
        out = {USER_ENV: self.user, PASSWORD_ENV: self.password} if self.user else {}
        return out | ({CA_ENV: self.ca_file} if self.ca_file else {})


def servers(urls: str) -> list[str]:
    """`nats://a:4222,nats://b:4222` (or separated by spaces) → the list nats-py takes."""
    found = [u.strip() for u in urls.replace(" ", ",").split(",") if u.strip()]
    if not found:
        raise ValueError("no NATS server given")
    return found


async def connect_service(
    urls: str,
    name: str,
    auth: NatsAuth | None = None,
    timeout: float = 5.0,
    options: ConnectOptions | None = None,
) -> NATS:
    """A long-running service's connection: every server of the list, reconnecting forever
    (to whichever server of the list answers: a cluster's failover) once connected. The
    first connection has a deadline: a service pointed at no server says so and exits
    (`Unreachable`), for its supervisor (up, systemd) to restart it. Credentials: `auth`
    (the user `up` made for the service) and `options` (an install's files), else both
    from the environment."""
    kwargs = _kwargs(auth, options)
    nc = NATS()
    try:
        await asyncio.wait_for(
            nc.connect(
                servers=servers(urls),
                name=name,
                max_reconnect_attempts=-1,
                reconnect_time_wait=0.25,  # type: ignore[arg-type]  # typed int, takes seconds
                connect_timeout=5,
                error_cb=_one_line(name),
                **kwargs,
            ),
            timeout,
        )
    except (TimeoutError, OSError, nats.errors.Error) as e:
        with contextlib.suppress(Exception):
            await nc.close()
        raise Unreachable(f"no NATS server answered at {urls} within {timeout:.0f}s") from e
    return nc


def _kwargs(auth: NatsAuth | None, options: ConnectOptions | None) -> dict[str, Any]:
    """nats-py's keyword arguments from both sources; an install's TLS files win over the
    CA `up` generated."""
    auth = auth or NatsAuth.from_env()
    return (auth.options() if auth else {}) | (options or ConnectOptions.from_env()).nats_kwargs()


def _one_line(name: str) -> Callable[[Exception], Awaitable[None]]:
    """nats-py's default error callback prints a traceback per failed reconnect attempt;
    this logs one line per change of error instead."""
    last = [""]

    async def on_error(e: Exception) -> None:
        said = f"{type(e).__name__}: {e}"
        if said != last[0]:
            last[0] = said
            log.warning("nats connection error", service=name, error=said)

    return on_error


class Unreachable(ConnectionError):
    """No server of the list answered in time."""


class NotAuthorized(Unreachable):
    """A server answered and refused the credentials (or their absence)."""


async def connect_once(
    urls: str,
    name: str = "virtstream-cli",
    timeout: float = 3.0,
    auth: NatsAuth | None = None,
    options: ConnectOptions | None = None,
) -> NATS:
    """A command's connection: one clear failure within `timeout` instead of retrying.
    (nats-py keeps retrying the initial connection even with reconnects off, so the
    deadline is ours.) A refusal of the credentials is `NotAuthorized`."""
    kwargs = _kwargs(auth, options)
    auth = auth or NatsAuth.from_env()
    refused: list[str] = []

    async def on_error(e: Exception) -> None:  # instead of a traceback per attempt
        if "authorization" in str(e).lower() or "authentication" in str(e).lower():
            refused.append(str(e))

    nc = NATS()
    try:
        await asyncio.wait_for(
            nc.connect(
                servers=servers(urls),
                name=name,
                connect_timeout=max(1, int(timeout)),
                max_reconnect_attempts=0,
                allow_reconnect=False,
                error_cb=on_error,
                **kwargs,
            ),
            timeout,
        )
    except (TimeoutError, OSError, nats.errors.Error) as e:
        with contextlib.suppress(Exception):
            await nc.close()
        text = str(e).lower()
        if refused or "authorization" in text or "authentication" in text:
            who = f"user {auth.user!r}" if auth and auth.user else "no credentials"
            raise NotAuthorized(
                f"NATS at {urls} refused the credentials ({who}): run the command where "
                "`virtstream up` keeps its data dir, or set VIRTSTREAM_DATA_DIR"
            ) from e
        raise Unreachable(f"no NATS server answered at {urls}") from e
    return nc
