"""Runs tests/long_turn_scenario.py in its own pytest process, once per test session."""
from __future__ import annotations

from side_run import SideRun

_run = SideRun("long-turn")


def start() -> None:
    _run.start(["tests/long_turn_scenario.py"])


def result(timeout: float = 1800) -> tuple[int, str]:
    start()
    return _run.result(timeout)


def abandon() -> None:
    _run.abandon()
