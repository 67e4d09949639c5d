"""Connecting to NATS: one server or a cluster, given as one URL or a comma-separated list.

Services reconnect forever (a restarted server or a cluster failover must never end a
service); one-shot commands give up at once so a user hears about it within seconds."""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
from dataclasses import dataclass
from typing import Any

import nats
from nats.aio.client import Client as NATS

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


async def connect_service(urls: str, name: str, auth: NatsAuth | None = None) -> NATS:
    """A long-running service's connection: every server of the list, reconnecting forever;
    credentials from `auth`, else the environment."""
    auth = auth or NatsAuth.from_env()
    return await nats.connect(
        servers=servers(urls),
        name=name,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.25,
        connect_timeout=5,
        **(auth.options() if auth else {}),
    )


class Unreachable(ConnectionError):
    """No server of the list answered in time."""


class NotAuthorized(Unreachable):
    """A server answered and refused the credentials (or their absence)."""


async def connect_once(
    urls: str,
    name: str = "virtstream-cli",
    timeout: float = 3.0,
    auth: NatsAuth | None = None,
) -> NATS:
    """A command's connection: one clear failure within `timeout` instead of retrying.
    (nats-py keeps retrying the initial connection even with reconnects off, so the
    deadline is ours.) A refusal of the credentials is `NotAuthorized`."""
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
                **(auth.options() if auth else {}),
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
