"""The global options (`--server`, `-n`, `--debug`), set by the app's callback before any
command runs and read by every command module."""

from __future__ import annotations

import os

DEFAULT_SERVER = "https://127.0.0.1:8080"


class Settings:
    server = os.environ.get("VIRTSTREAM_SERVER", DEFAULT_SERVER)
    server_given = "VIRTSTREAM_SERVER" in os.environ  # --server or the environment
    namespace = "default"
    debug = bool(os.environ.get("VIRTSTREAM_DEBUG"))


settings = Settings()
