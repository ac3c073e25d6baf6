"""``python -m agents.querynode``: run the querynode worker with the ``OSPREY_*`` configuration."""

from __future__ import annotations

from agents.interpreter import exec_with_huge_pages
from schemas.config import OspreyConfig


def main() -> None:
    exec_with_huge_pages(OspreyConfig.from_env())  # first: the new image repeats what came before
    # imported after that exec, so a restarted image imports them once (~1 s)
    from agents.process import run_from_env
    from agents.querynode.app import create_app

    run_from_env(create_app)


if __name__ == "__main__":
    main()
