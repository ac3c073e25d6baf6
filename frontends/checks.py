"""``osprey check`` (and the first step of ``osprey test``): lint, types and import layers.

Runs, from the checkout's root and in this order, stopping at the first failure: ``ruff check``
(rules and line length in pyproject.toml), ``ruff format --check``, ``lint-imports`` (the layer
contracts: an upward or sideways import fails here) and ``mypy``. Each tool is the one installed
next to this Python (the pinned versions of the ``test`` extra).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

CHECKS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ruff", ("ruff", "check", "--quiet", ".")),
    ("ruff format", ("ruff", "format", "--check", "--quiet", ".")),
    ("import layers", ("lint-imports", "--no-cache")),
    ("mypy", ("mypy",)),
)


def run_checks(root: Path) -> int:
    """Run every check in ``root``; 0 if all pass, else the failing tool's exit status."""
    bin_dir = Path(sys.executable).parent
    for name, (tool, *args) in CHECKS:
        started = time.monotonic()
        done = subprocess.run([str(bin_dir / tool), *args], cwd=root, capture_output=True, text=True)
        seconds = time.monotonic() - started
        if done.returncode != 0:
            sys.stderr.write(done.stdout + done.stderr)
            print(f"osprey check: {name} failed ({seconds:.1f} s)", file=sys.stderr)
            return done.returncode
        print(f"osprey check: {name} ok ({seconds:.1f} s)", file=sys.stderr)
    return 0
