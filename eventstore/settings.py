"""Stream settings, exposed in config (`virtstream up` flags, service options)."""

from __future__ import annotations

from typing import Literal

import msgspec


class StreamSettings(msgspec.Struct, frozen=True, kw_only=True):
    name: str = "VIRT"
    storage: Literal["file", "memory"] = "file"
    # R3 on a 3- or 5-server cluster; an embedded single server can only hold R1
    replicas: int = 1
    # how long JetStream remembers Nats-Msg-Id values for dropping duplicate appends
    duplicate_window_seconds: float = 120.0
    dlq_name: str = "VIRT_DLQ"
    # fsync policy is a server setting (`jetstream { sync_interval: ... }`); the embedded
    # server takes it from here, an external cluster from its own config
    sync_interval: str = "2m"
