"""MallocTrimmer: trims on its interval once started, refuses a non-positive interval."""

from __future__ import annotations

import pytest

from agents.malloc_trim import MallocTrimmer, _glibc_malloc_trim
from tests.eventually import eventually


def test_an_interval_must_be_above_zero() -> None:
    with pytest.raises(ValueError, match="interval_s must be above 0"):
        MallocTrimmer(0)


@pytest.mark.skipif(_glibc_malloc_trim() is None, reason="needs glibc's malloc_trim")
async def test_it_trims_on_its_interval_once_started() -> None:
    trimmer = MallocTrimmer(0.01)
    await trimmer.start()
    try:
        await eventually("three trims", lambda: trimmer.trims >= 3, poll_s=0.01)
        assert trimmer.health().dead_loops == []
    finally:
        await trimmer.stop()
    assert not trimmer.health().started
