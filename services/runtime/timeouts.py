"""The two timeouts that keep a VM from running twice, in one place.

The controller declares a node unresponsive when its handler's heartbeat is older than
`node_timeout`; it then fails the node's VMIs, and their VMs are started elsewhere. A
handler that has not written a heartbeat for `fence_timeout(node_timeout)` (it lost the
bus, or the bus lost it) stops every VM of its node first: the fence is half the node
timeout, so it has stopped them well before the controller's decision (clock skew,
heartbeat latency and the fence's own seconds fit in the other half)."""

from __future__ import annotations

NODE_TIMEOUT = 60.0
FENCE_FRACTION = 0.5
#: handlers beat this many times per node timeout (at most every 5 s)
BEATS_PER_TIMEOUT = 4
MAX_HEARTBEAT_INTERVAL = 5.0


def fence_timeout(node_timeout: float = NODE_TIMEOUT) -> float:
    """Seconds without a successful heartbeat after which a handler stops its VMs."""
    return node_timeout * FENCE_FRACTION


def heartbeat_interval(node_timeout: float = NODE_TIMEOUT) -> float:
    return min(MAX_HEARTBEAT_INTERVAL, node_timeout / BEATS_PER_TIMEOUT)


assert fence_timeout() < NODE_TIMEOUT  # the fence is strictly shorter, whatever the ratio
