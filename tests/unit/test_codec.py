from events import subjects
from events.catalog import NodeJoined, NodeSystemInfo, Resources, VMStartRequested
from events.codec import decode, encode
from events.meta import Kind
from tests.factories import meta

# A NodeJoined as a v1 handler wrote it: whole CPUs and MiB, tag "NodeJoined".
STORED_V1 = (
    b'{"type":"NodeJoined","meta":{"eventId":"e1","aggregate":{"kind":"node","namespace":"_",'
    b'"name":"node-1"},"occurredAt":1700000000.5,"correlationId":"c1","actor":'
    b'{"service":"handler","node":"node-1"}},"node":"node-1","cpus":4,"memoryMib":8192,'
    b'"labels":{"zone":"a"}}'
)


def test_event_round_trips_with_its_tag() -> None:
    ev = VMStartRequested(meta=meta(), paused=True)
    data = encode(ev)
    assert b'"type":"VMStartRequested"' in data
    assert decode(data) == ev


def test_stored_v1_event_is_upcast_to_current_shape() -> None:
    ev = decode(STORED_V1)
    assert isinstance(ev, NodeJoined)
    assert ev.capacity == Resources(cpu_millis=4000, memory_bytes=8 * 1024**3)
    assert ev.labels == {"zone": "a"}
    assert ev.meta.event_id == "e1"
    # written again, it takes the current tag: the old bytes stay as they were
    assert b'"type":"NodeJoined/v3"' in encode(ev)


def test_stored_v2_node_joined_is_upcast_with_its_system_info_unknown() -> None:
    v2 = encode(decode(STORED_V1)).replace(b'"NodeJoined/v3"', b'"NodeJoined/v2"')
    v2 = v2.replace(b',"info":{}', b"")
    ev = decode(v2)
    assert isinstance(ev, NodeJoined)
    assert ev.info == NodeSystemInfo() and ev.labels == {"zone": "a"}


def test_subjects_route_by_node_and_survive_dots() -> None:
    m = meta(Kind.VMI, "web.v1", "prod", node="node-1")
    s = subjects.event_subject(m.aggregate, "PodScheduled", m.node)
    assert s == "virt.vmi.prod.web~v1.PodScheduled.node-1"
    assert subjects.matches(subjects.node_filter(Kind.VMI, "node-1"), s)
    assert not subjects.matches(subjects.node_filter(Kind.VMI, "node-2"), s)
    assert subjects.matches(subjects.aggregate_filter(Kind.VMI, "prod", "web.v1"), s)
    assert subjects.parse(s) == ("vmi", "prod", "web.v1", "PodScheduled", "node-1")
    assert subjects.aggregate_key(s) == "vmi/prod/web~v1"
