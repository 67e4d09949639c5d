"""Kubernetes resource quantities ("64Mi", "1Gi", "500m", "1e3") as plain integers.

Objects keep quantities as the strings users wrote (so they round-trip); code that needs
numbers (admission, scheduler, launcher) parses them here.
"""

from __future__ import annotations

import math
import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10**3),
    "K": Decimal(10**3),  # not Kubernetes-canonical, but commonly written
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
}
_QUANTITY = re.compile(
    r"^(?P<num>[+-]?(?:\d+\.?\d*|\.\d+))"
    r"(?:(?P<bin>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<exp>[eE][+-]?\d+)|(?P<dec>[numkKMGTPE]?))$"
)


# Kubernetes caps quantities at 2^63-1 in magnitude ("Numbers larger ... will be capped").
QUANTITY_MAX = 2**63 - 1


def quantity_decimal(value: str | int | float) -> Decimal:
    """Exact value of a quantity; ValueError on anything Kubernetes would reject."""
    if isinstance(value, bool):
        raise ValueError(f"invalid quantity: {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"invalid quantity: {value!r}")
    if isinstance(value, int | float):
        return Decimal(str(value))
    if not isinstance(value, str):
        raise ValueError(f"invalid quantity: {value!r}")
    match = _QUANTITY.match(value.strip())
    if match is None or not value.strip():
        raise ValueError(f"invalid quantity: {value!r}")
    try:
        number = Decimal(match["num"])
    except InvalidOperation as exc:  # pragma: no cover - regex already guards this
        raise ValueError(f"invalid quantity: {value!r}") from exc
    if match["bin"]:
        return number * _BINARY[match["bin"]]
    if match["exp"]:
        try:
            return number * Decimal(10) ** int(match["exp"][1:])
        except ArithmeticError:  # an exponent beyond what a Decimal holds: "1e99999999"
            raise ValueError(f"invalid quantity: {value!r}") from None
    return number * _DECIMAL[match["dec"] or ""]


def _capped_int(value: Decimal) -> int:
    # capped before the int: "1e100" must not become a 100-digit integer in every fold
    if value > QUANTITY_MAX:
        return QUANTITY_MAX
    if value < -QUANTITY_MAX:
        return -QUANTITY_MAX
    return int(value.to_integral_value(rounding=ROUND_CEILING))


def parse_quantity(value: str | int | float) -> int:
    """Integer value (bytes for memory); fractions round up as Kubernetes' Value() does,
    and magnitudes beyond 2^63-1 are capped as Kubernetes caps them."""
    return _capped_int(quantity_decimal(value))


def parse_cpu_millis(value: str | int | float) -> int:
    """CPU in millicores: "500m" -> 500, "2" -> 2000, "0.5" -> 500 (capped like
    `parse_quantity`)."""
    return _capped_int(quantity_decimal(value) * 1000)


def in_range(value: str | int | float) -> bool:
    """Whether Kubernetes can hold the quantity without capping it."""
    return abs(quantity_decimal(value)) <= QUANTITY_MAX
