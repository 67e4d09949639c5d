import pytest

from eventstore.settings import StreamSettings


def test_settings_come_from_the_environment_then_arguments(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("VIRTSTREAM_STREAM_NAME", "EVENTS")
    monkeypatch.setenv("VIRTSTREAM_STREAM_REPLICAS", "3")
    monkeypatch.setenv("VIRTSTREAM_STREAM_DUPLICATE_WINDOW", "30")
    monkeypatch.setenv("VIRTSTREAM_SYNC_INTERVAL", "always")
    s = StreamSettings.from_env(storage="memory")
    assert (s.name, s.dlq_name, s.replicas, s.storage) == ("EVENTS", "EVENTS_DLQ", 3, "memory")
    assert s.duplicate_window_seconds == 30.0 and s.sync_interval == "always"


def test_defaults_without_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("NAME", "STORAGE", "REPLICAS", "DUPLICATE_WINDOW"):
        monkeypatch.delenv(f"VIRTSTREAM_STREAM_{var}", raising=False)
    monkeypatch.delenv("VIRTSTREAM_SYNC_INTERVAL", raising=False)
    assert StreamSettings.from_env() == StreamSettings()
