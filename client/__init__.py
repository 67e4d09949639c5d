"""virtstream's Python client (see client.api)."""

from client.api import ApiError, AsyncClient, Client

__all__ = ["ApiError", "AsyncClient", "Client"]
