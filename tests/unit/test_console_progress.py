"""Bring-up progress: silent when quick, two lines when slow, and says so when it failed."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from pytest_wedge.plugin.console import bring_up


class Reporter:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.wrote = threading.Event()

    def write_line(self, text: str) -> None:
        self.lines.append(text)
        self.wrote.set()


def fake_config(reporter: Reporter) -> SimpleNamespace:
    plugins = {"terminalreporter": reporter, "capturemanager": None}
    return SimpleNamespace(pluginmanager=SimpleNamespace(get_plugin=plugins.get))


def test_a_quick_bring_up_prints_nothing() -> None:
    reporter = Reporter()
    with bring_up(fake_config(reporter), "bringing up X", after_s=60):  # type: ignore[arg-type]
        pass
    assert reporter.lines == []


def test_a_slow_bring_up_says_what_it_waits_for_and_when_it_is_ready() -> None:
    reporter = Reporter()
    with bring_up(fake_config(reporter), "bringing up X", after_s=0.01):  # type: ignore[arg-type]
        assert reporter.wrote.wait(timeout=10)  # the block outlives the threshold
    assert reporter.lines[0] == "wedge: bringing up X ..."
    assert reporter.lines[1].startswith("wedge: bringing up X: ready after ")
    assert len(reporter.lines) == 2


def test_a_failed_slow_bring_up_says_it_failed() -> None:
    reporter = Reporter()
    with pytest.raises(RuntimeError), bring_up(fake_config(reporter), "X", after_s=0.01):  # type: ignore[arg-type]
        assert reporter.wrote.wait(timeout=10)
        raise RuntimeError("no")
    assert reporter.lines[-1].startswith("wedge: X: failed after ")


def test_without_a_terminal_reporter_nothing_is_written() -> None:
    config = SimpleNamespace(pluginmanager=SimpleNamespace(get_plugin=lambda name: None))
    with bring_up(config, "X", after_s=0.0):  # type: ignore[arg-type]
        pass
