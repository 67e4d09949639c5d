import pytest

from events.quantity import parse_cpu_millis, parse_quantity


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("64Mi", 64 * 2**20),
        ("1Gi", 2**30),
        ("2Ki", 2048),
        ("1Ti", 2**40),
        ("1Pi", 2**50),
        ("1Ei", 2**60),
        ("1024M", 1024 * 10**6),
        ("1K", 1000),
        ("1k", 1000),
        ("1G", 10**9),
        ("1T", 10**12),
        ("1P", 10**15),
        ("1E", 10**18),
        ("1e3", 1000),
        ("1.5Gi", 3 * 2**29),
        ("123", 123),
        (123, 123),
        ("500m", 1),  # rounds up like Kubernetes' Value()
    ],
)
def test_parse_quantity(text: str | int, expected: int) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"), [("500m", 500), ("2", 2000), (2, 2000), ("0.5", 500), ("1.5", 1500)]
)
def test_parse_cpu_millis(text: str | int, expected: int) -> None:
    assert parse_cpu_millis(text) == expected


@pytest.mark.parametrize("garbage", ["", "abc", "1Gb", "Mi", "1..2", "1 Gi", "--1"])
def test_garbage_raises_value_error(garbage: str) -> None:
    with pytest.raises(ValueError, match="invalid quantity"):
        parse_quantity(garbage)
    with pytest.raises(ValueError, match="invalid quantity"):
        parse_cpu_millis(garbage)
