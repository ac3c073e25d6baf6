"""Interpreter settings every Osprey process applies before it starts (never the user's own
process: :class:`~frontends.inprocess.InProcessClient` leaves its host's interpreter alone).

The GIL switch interval. An Osprey process runs Python threads beside its event loop: Faust's
consumer thread, gRPC's poller, the executor threads around hnswlib and Parquet. When the loop's
thread gives the GIL up (a socket write, a numpy call over a few thousand values) and another
thread takes it, the loop waits until that thread blocks or until the switch interval has passed:
CPython's default is 5 ms. Measured alone (numpy max over 5,000 values beside a thread running
Python): 18 us without that thread, 1.8 ms with it at 5 ms, 0.16 ms at 0.5 ms. Through pymilvus
(``bench.pymilvus``, four alternating pairs, docs/benchmarks.md) 0.5 ms raised sequential search
from 122-142 to 144-166 QPS (p50 6.6-7.6 ms to 5.6-6.3 ms); the ingest path, which keeps both
cores busy, did not change.
"""

from __future__ import annotations

import sys

from schemas.config import OspreyConfig

MS_PER_S = 1000.0


def apply_interpreter_settings(config: OspreyConfig) -> None:
    """Set this process's GIL switch interval to ``config.python_switch_interval_ms``."""
    sys.setswitchinterval(config.python_switch_interval_ms / MS_PER_S)
