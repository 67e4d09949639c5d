"""Which kinds each verb acts on, from the kind registry: the kinds serving the verb as a
subresource (`start` on VMs, `pause` on VMIs, `drain` on nodes), and for a VMI's verbs the
VM too (its VMI has its name), as virtctl's `pause vm NAME`. Every verb takes `NAME` (its
first kind), `KIND NAME` or `KIND/NAME`, with kubectl's and KubeVirt's names for the kind."""

from __future__ import annotations

from typing import NamedTuple

from events.meta import Kind, KindToken
from kinds.registry import REGISTRY, Registry
from kinds.spec import KindSpec

# verbs that are no subresource: the kinds they accept
_OTHER: dict[str, tuple[Kind, ...]] = {"migrate-cancel": (Kind.VM, Kind.VMI)}
_LABEL: dict[KindToken, str] = {Kind.VM: "VM", Kind.VMI: "VMI", Kind.NODE: "node"}


class Target(NamedTuple):
    spec: KindSpec
    name: str

    def says(self, what: str) -> str:
        """virtctl's wording: `VM vm-cirros was scheduled to start`."""
        label = _LABEL.get(self.spec.event_kind, self.spec.singular)
        return f"{label} {self.name} was {what}"


def kinds_for(verb: str, kinds: Registry = REGISTRY) -> list[KindSpec]:
    """The kinds `verb` acts on, the one a bare NAME means first."""
    if verb in _OTHER:
        return [kinds.of(k) for k in _OTHER[verb]]
    own = [s for s in kinds if s.subresource(verb) is not None]
    if any(s.event_kind == Kind.VMI for s in own):
        own.append(kinds.of(Kind.VM))
    return own


def target(verb: str, first: str, second: str | None, kinds: Registry = REGISTRY) -> Target:
    """`NAME`, `KIND NAME` or `KIND/NAME` → the kind and name; ValueError says the forms."""
    allowed = kinds_for(verb, kinds)
    names = " or ".join(_short(s) for s in allowed)
    if second is not None:
        kind, name = first, second
    elif "/" in first:
        kind, name = first.split("/", 1)
    else:
        return Target(allowed[0], first)
    spec = kinds.get(kind)
    if spec is None or spec not in allowed or not name or "/" in name:
        raise ValueError(
            f"{verb} acts on {names}: write {verb} NAME, {verb} {_short(allowed[0])} NAME "
            f"or {verb} {_short(allowed[0])}/NAME (got {' '.join(filter(None, (first, second)))})"
        )
    return Target(spec, name)


def _short(spec: KindSpec) -> str:
    """The name references use (`vm`, `vmi`, `node`), as in `why vm/NAME`."""
    return str(spec.event_kind)
