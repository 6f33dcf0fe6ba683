"""What the test process asks of a running sampler on its stdin, and the answers it waits for
(``evidence/sampler.py`` defines the lines): the link series so far, and a slow sample now (a
*mark*). The probe's reader thread hands the answers in as their frames arrive."""

from __future__ import annotations

import threading
from typing import IO, Any

from pytest_wedge.evidence.sampler import MARK

Series = tuple[int, list[Any]]


class SamplerAsks:
    def __init__(self) -> None:
        # One question at a time: the answers carry no question's name.
        self._one_at_a_time = threading.Lock()
        self._came = threading.Condition()
        self._series: Series | None = None
        self._newest_slow_at = 0.0  # the moment of the newest slow sample received
        self._ended = False  # the sampler's output ended: nothing more will answer

    # -- the reader thread's side ------------------------------------------------------------

    def series_came(self, series: Series) -> None:
        with self._came:
            self._series = series
            self._came.notify_all()

    def slow_came(self, at: float) -> None:
        with self._came:
            self._newest_slow_at = max(self._newest_slow_at, at)
            self._came.notify_all()

    def output_ended(self) -> None:
        with self._came:
            self._ended = True
            self._came.notify_all()

    # -- the asker's side --------------------------------------------------------------------

    def series(self, stdin: IO[bytes], timeout_s: float) -> Series | None:
        """The link series and its error count; None if the sampler does not answer."""
        with self._one_at_a_time:
            with self._came:
                self._series = None
            if not _ask(stdin, b""):
                return None
            with self._came:
                self._came.wait_for(lambda: self._series is not None or self._ended, timeout_s)
                return self._series

    def mark(self, stdin: IO[bytes], asked_at: float, timeout_s: float) -> float | None:
        """The moment of a slow sample taken at or after ``asked_at``, once it has been
        received; None if none came within ``timeout_s``."""
        with self._one_at_a_time:
            if not _ask(stdin, MARK):
                return None
            with self._came:
                self._came.wait_for(
                    lambda: self._newest_slow_at >= asked_at or self._ended, timeout_s
                )
                return self._newest_slow_at if self._newest_slow_at >= asked_at else None


def _ask(stdin: IO[bytes], line: bytes) -> bool:
    try:
        stdin.write(line + b"\n")
        stdin.flush()
    except (OSError, ValueError):  # stopped, or the sampler is gone
        return False
    return True
