"""Request and object ids for the api.

uuid4 reads the kernel's random source on every call, and the api makes several per
request: ~8% of its CPU per VM create (py-spy). Ids here must be unique, not secret, so a
per-process PRNG seeded from the kernel (and reseeded in forked children) gives the same
128 random bits at a fraction of the cost."""

from __future__ import annotations

import os
import random

_rng = random.Random(os.urandom(32))


def _reseed() -> None:
    _rng.seed(os.urandom(32))


os.register_at_fork(after_in_child=_reseed)


def new_id() -> str:
    """128 random bits as 32 hex characters."""
    return f"{_rng.getrandbits(128):032x}"
