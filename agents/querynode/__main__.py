"""``python -m agents.querynode`` (``./osprey querynode``): a query node in the foreground with the
``OSPREY_*`` configuration, until SIGTERM or SIGINT."""

from __future__ import annotations

from agents.interpreter import exec_with_huge_pages
from schemas.config import OspreyConfig


def main() -> None:
    config = OspreyConfig.from_env()
    exec_with_huge_pages(config)  # first: the new image repeats what came before
    # imported after that exec, so a restarted image imports them once (~1 s)
    from agents.main import run_until_stopped
    from agents.querynode.app import run

    run_until_stopped(config, lambda stop, on_fatal: run(config, stop, on_fatal))


if __name__ == "__main__":
    main()
