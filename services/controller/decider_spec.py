"""`controller=MODULE:FACTORY`: which controller decider a what-if or a shadow runs.
FACTORY() from MODULE is the decider; MODULE is looked up from a directory given (the
working directory of whoever named it, as uvicorn looks up an app), so a checkout of
another version can be named from its root."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable

from services.controller.whatif import Decider

SERVICES = ("controller",)


def parse(spec: str) -> tuple[str, str, str]:
    """(service, module, factory); ValueError when it is not SERVICE=MODULE:FACTORY."""
    service, _, target = spec.partition("=")
    module, _, name = target.partition(":")
    if service not in SERVICES or not module or not name:
        raise ValueError(f"{spec!r}: expected controller=MODULE:FACTORY")
    return service, module, name


def load(spec: str, search: str) -> Decider:
    """The decider `spec` names, MODULE found from `search` too; ValueError saying why not."""
    _, module, name = parse(spec)
    if search not in sys.path:
        sys.path.insert(0, search)
    try:
        factory: Callable[[], Decider] = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"{spec!r}: {e}") from None
    return factory()
