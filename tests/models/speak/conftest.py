"""The speak tests' shared stage."""

from __future__ import annotations

import pytest

from runtime.models.speak.executor import SpeakExecutor


@pytest.fixture(scope="module")
def hibari() -> SpeakExecutor:
    """The default profile's speak stage (hibari for English, every shipped
    voice of the other engines), loaded once per test file."""
    ex = SpeakExecutor(engine="hibari", threads=1)
    ex.load()
    yield ex
    ex.close()
