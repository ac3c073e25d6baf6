"""``python -m agents.querynode``: run the querynode worker with the ``OSPREY_*`` configuration."""

from __future__ import annotations

from agents.process import run_from_env
from agents.querynode.app import create_app


def main() -> None:
    run_from_env(create_app)


if __name__ == "__main__":
    main()
