"""``python -m agents.rootcoord``: run the rootcoord worker with the ``OSPREY_*`` configuration."""

from __future__ import annotations

from agents.process import run_from_env
from agents.rootcoord.app import create_app


def main() -> None:
    run_from_env(create_app)


if __name__ == "__main__":
    main()
