"""Fixtures shared by the model tests."""

import pytest


@pytest.fixture
def env_switch(monkeypatch):
    """``env_switch(NAME)`` -> a setter of the environment variable NAME for this
    test: a value sets it, None removes it (the switch's default)."""
    def switch_of(name: str):
        def set_mode(value: str | None) -> None:
            if value is None:
                monkeypatch.delenv(name, raising=False)
            else:
                monkeypatch.setenv(name, value)
        return set_mode
    return switch_of
