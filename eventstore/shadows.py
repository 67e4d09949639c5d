"""Where shadows (services/shadow/) keep their latest divergences for the api to show: a
key-value bucket, one key per shadow (its name), its value JSON the shadow writes."""

from __future__ import annotations

from eventstore.port import Bucket, EventLog

BUCKET = "virt-shadow"
DESCRIPTION = "the latest divergences of shadow services (virtstream)"


async def bucket(store: EventLog) -> Bucket:
    """Bind the bucket, creating it when missing."""
    made = await store.bucket(BUCKET, description=DESCRIPTION)
    assert made is not None, "a bucket asked to be created exists"
    return made


async def latest(store: EventLog, name: str) -> bytes | None:
    """What the shadow `name` wrote last; None when it never ran."""
    found = await store.bucket(BUCKET, create=False)
    return None if found is None else await found.get(name)


async def names(store: EventLog) -> list[str]:
    """The shadows that ever wrote, sorted."""
    found = await store.bucket(BUCKET, create=False)
    return [] if found is None else await found.keys()
