"""The query node's loader keeps a loaded segment's files in the node cache over others: it pins
their keys when it loads the segment and unpins them once, when the segment is released."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from agents.querynode.loader import SegmentLoader
from schemas.segment import INSERT_LOG_FILE, PK_STATS_FILE, SegmentInfo, SegmentState
from state.objectstore import LocalObjectStore
from tests.unit.test_segment_files import KEY, PATH, all_types_schema, write


class CountingStore(LocalObjectStore):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.pins: dict[str, int] = {}

    def pin(self, keys: Sequence[str]) -> None:
        for key in keys:
            self.pins[key] = self.pins.get(key, 0) + 1

    def unpin(self, keys: Sequence[str]) -> None:
        for key in keys:
            self.pins[key] -= 1


async def test_a_loaded_segment_pins_its_files_until_released(tmp_path: Path) -> None:
    write(tmp_path, n=20)
    store = CountingStore(tmp_path)
    loader = SegmentLoader(store, meta=None)  # type: ignore[arg-type]  # load() reads no meta
    info = SegmentInfo(**KEY.model_dump(), state=SegmentState.FLUSHED, num_rows=20, path=PATH)
    segment = await loader.load(info, all_types_schema())
    assert store.pins == {f"{PATH}/{INSERT_LOG_FILE}": 1, f"{PATH}/{PK_STATS_FILE}": 1}
    segment.release()
    segment.release()  # idempotent: unpinned once
    assert store.pins == {f"{PATH}/{INSERT_LOG_FILE}": 0, f"{PATH}/{PK_STATS_FILE}": 0}
