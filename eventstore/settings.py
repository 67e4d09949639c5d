"""Stream settings, exposed in config (`virtstream up` flags, service options)."""

from __future__ import annotations

import os
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
    # the event stream is the hot log, mirrored into `<name>_ARCHIVE` (complete, S2,
    # never purged), and ended aggregates may be purged from it (eventstore/archive.py);
    # False: one stream that denies purges and keeps everything
    archive: bool = True
    # fsync policy is a server setting (`jetstream { sync_interval: ... }`); the embedded
    # server takes it from here, an external cluster from its own config. "always" fsyncs
    # every write before the ack: an acknowledged event survives a power loss (the server's
    # own default, 2m, can lose up to two minutes of acknowledged events)
    sync_interval: str = "always"

    @classmethod
    def from_env(cls, **overrides: object) -> StreamSettings:
        """Defaults, overridden by VIRTSTREAM_STREAM_{NAME,STORAGE,REPLICAS,DUPLICATE_WINDOW},
        VIRTSTREAM_STREAM_ARCHIVE (0: no archive) and VIRTSTREAM_SYNC_INTERVAL (what
        `virtstream up` sets for its services), then by explicit arguments."""
        env = os.environ
        values: dict[str, object] = {}
        if name := env.get("VIRTSTREAM_STREAM_NAME"):
            values["name"] = name
            values["dlq_name"] = f"{name}_DLQ"
        if storage := env.get("VIRTSTREAM_STREAM_STORAGE"):
            values["storage"] = storage
        if replicas := env.get("VIRTSTREAM_STREAM_REPLICAS"):
            values["replicas"] = int(replicas)
        if window := env.get("VIRTSTREAM_STREAM_DUPLICATE_WINDOW"):
            values["duplicate_window_seconds"] = float(window)
        if sync := env.get("VIRTSTREAM_SYNC_INTERVAL"):
            values["sync_interval"] = sync
        if (arch := env.get("VIRTSTREAM_STREAM_ARCHIVE")) is not None:
            values["archive"] = arch.lower() not in ("0", "false", "no", "")
        return msgspec.convert({**values, **overrides}, cls)
