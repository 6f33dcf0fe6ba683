"""The sampler's frames (``evidence/sampler.py`` writes them, the probe reads them): a 4-byte
big-endian length, then a pickle of a tuple whose first item says what it is.

Pickle, not JSON: the reader is the probe that started the sampler, with the same code, and a
pickle costs it a fraction of decoding JSON and rebuilding the dataclasses.
"""

from __future__ import annotations

import pickle
import struct
from typing import IO, Any, BinaryIO

from pytest_wedge.evidence.snapshot import Snapshot

FRAME_HEAD = struct.Struct(">I")


def read_frame(stream: IO[bytes]) -> tuple[Any, ...] | None:
    """The next frame from the sampler's stdout; None at end of file."""
    head = stream.read(FRAME_HEAD.size)
    if len(head) < FRAME_HEAD.size:
        return None
    body = stream.read(FRAME_HEAD.unpack(head)[0])
    frame = pickle.loads(body)  # trusted: our own child process, running this same code
    return frame if isinstance(frame, tuple) else ("error", f"not a frame: {frame!r}"[:200])


def sample_frame(slow: bool, snapshot: Snapshot) -> tuple[Any, ...]:
    """A sample's frame. The snapshot goes in pickled on its own, so the probe's reader in the
    test process (which shares the interpreter lock with the harness) stores it as bytes and
    unpickles it only if the sample is ever read: most never are."""
    body = pickle.dumps(snapshot, protocol=pickle.HIGHEST_PROTOCOL)
    return ("sample", slow, snapshot.taken_at, body)


def sample_of(frame: tuple[Any, ...]) -> Snapshot:
    """The snapshot of a :func:`sample_frame` (``TypeError`` if it holds something else)."""
    snapshot = pickle.loads(frame[3])  # trusted: our own child process, running this same code
    if not isinstance(snapshot, Snapshot):
        raise TypeError(f"a sample frame holds a {type(snapshot).__name__}, not a Snapshot")
    return snapshot


def frame_bytes(frame: tuple[Any, ...]) -> bytes:
    body = pickle.dumps(frame, protocol=pickle.HIGHEST_PROTOCOL)
    return FRAME_HEAD.pack(len(body)) + body


class Outbox:
    """The frames of fast ticks wait here and go out with the next slow tick's, in one write:
    the probe's reader wakes once a second, not ten times, in the test process (where each
    wake-up takes the interpreter lock from the harness). Nothing reads fast samples while a
    test runs; slow ones go out at once."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.pending: list[bytes] = []

    def put(self, frame: tuple[Any, ...], *, now: bool) -> None:
        self.pending.append(frame_bytes(frame))
        if now:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            data, self.pending = b"".join(self.pending), []
            self.out.write(data)
            self.out.flush()
