"""Running a Faust app as a worker process, with the settings Osprey needs on any Kafka broker, or
as one service among others in a process that hosts several roles (:class:`FaustAppService`, the
standalone).

A worker's runtime (``app.osprey_runtime``, a :class:`agents.service.Service`) gets the process's
fatal hook: a loop whose crash stops the process (``OnCrash.STOP``) shuts the worker down as a
SIGTERM would, and the process exits with ``FATAL_EXIT_CODE``."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import faust
from faust.worker import Worker

from agents.interpreter import apply_interpreter_settings
from agents.ports import wait_for_any_port, wait_for_port
from agents.service import FatalExit, OnCrash, Service
from schemas.config import OspreyConfig

# How long the group waits for a member that stopped heart-beating (a kill -9) before moving its
# partitions: Kafka's smallest allowed value (group.min.session.timeout.ms = 6 s by default).
SESSION_TIMEOUT_S = 6.0
HEARTBEAT_INTERVAL_S = 2.0


def make_app(config: OspreyConfig, role: str, **settings: Any) -> faust.App:
    """A Faust app for ``role`` in ``config.cluster``: no web server, memory stores (durable state
    lives in Redis and the data directory, never in Faust changelogs), acks=all producers."""
    datadir = Path(config.data_dir) / "faust" / role
    datadir.mkdir(parents=True, exist_ok=True)
    app = faust.App(
        f"{config.cluster}-{role}",
        broker=f"osprey://{config.kafka}",  # streams/transport.py
        store="memory://",
        web_enabled=False,
        autodiscover=False,
        datadir=str(datadir),
        broker_session_timeout=SESSION_TIMEOUT_S,
        broker_heartbeat_interval=HEARTBEAT_INTERVAL_S,
        consumer_auto_offset_reset="earliest",
        consumer_max_fetch_size=config.consumer_max_fetch_bytes,  # Faust's 1 MiB = one event per fetch
        producer_acks=-1,
        topic_allow_declare=False,
        **settings,
    )
    app.osprey_fetch_wait_ms = config.consumer_fetch_wait_ms  # type: ignore[attr-defined]  # streams/transport.py
    app.osprey_fetch_idle_wait_ms = config.consumer_fetch_idle_ms  # type: ignore[attr-defined]
    return app


def run_worker(app: faust.App, loglevel: str = "info") -> None:
    """Run ``app`` until SIGTERM/SIGINT, or until its runtime's fatal hook is called (module doc:
    then exit with ``FATAL_EXIT_CODE``); blocks."""
    # the worker's own SIGTERM handler runs its shutdown (on_before_shutdown stops the runtime)
    fatal = FatalExit(lambda: os.kill(os.getpid(), signal.SIGTERM))
    runtime = getattr(app, "osprey_runtime", None)
    if isinstance(runtime, Service):
        runtime.on_fatal = fatal
    try:
        Worker(app, loglevel=loglevel, quiet=True, redirect_stdouts=False).execute_from_commandline()
    finally:
        fatal.exit_if_fatal()


DEPENDENCY_WAIT_S = 60.0  # how long a worker waits for the broker and Redis to accept connections


def run_from_env(create_app: Callable[[OspreyConfig], faust.App]) -> None:
    """A worker process's main: the ``OSPREY_*`` config, wait for the broker and Redis, run the
    app ``create_app`` builds (log level from ``config.log_level``)."""

    config = OspreyConfig.from_env()
    apply_interpreter_settings(config)
    wait_for_any_port(config.kafka_addresses, DEPENDENCY_WAIT_S, what="Kafka broker")
    wait_for_port(*config.redis_host_port, DEPENDENCY_WAIT_S, what="Redis")
    run_worker(create_app(config), loglevel=config.log_level.lower())


class FaustAppService(Service):
    """``app`` run by this service instead of a Faust :class:`~faust.worker.Worker`: started (its
    consumer, producer, agents and timers; the app's runtime starts with its first event, as in a
    worker) on this process's event loop, stopped on stop. The process's signals, logging and exit
    code stay the host's. The app's runtime reports a fatal loop to this service's hook; the app
    stopping by itself (a crash Faust did not recover from) is fatal too: its agents feed state
    that would silently stop moving."""

    def __init__(self, app: faust.App, name: str) -> None:
        super().__init__()
        self.app = app
        self.service_name = name
        self.runtime: Service | None = getattr(app, "osprey_runtime", None)

    async def on_start(self) -> None:
        if self.runtime is not None and self.runtime.on_fatal is None:
            self.runtime.on_fatal = self._fail
        await self.app.start()
        self.on_close(self.app.stop, f"faust app {self.app.conf.id}")  # stops its runtime too (on_before_shutdown)
        # STOP: an app that stopped by itself no longer consumes; the process restarts and
        # recovers from its checkpoints as a worker process would
        self.spawn(self._watch, f"{self.service_name}-app", on_crash=OnCrash.STOP)

    async def _watch(self) -> None:
        await self.app.wait_until_stopped()
        raise RuntimeError(f"faust app {self.app.conf.id} stopped by itself")
