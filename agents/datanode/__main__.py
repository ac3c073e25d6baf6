"""``python -m agents.datanode``: run the data node worker with the ``OSPREY_*`` configuration."""

from __future__ import annotations

from agents.datanode.app import create_app
from agents.process import run_from_env


def main() -> None:
    run_from_env(create_app)


if __name__ == "__main__":
    main()
