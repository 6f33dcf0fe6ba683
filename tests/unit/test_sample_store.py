"""The probe's samples as the test process keeps them: pickled until first read, in order,
with the runtime's view added when a slow one is unpickled."""

from __future__ import annotations

import pickle
import threading

from pytest_wedge.evidence.frames import sample_frame
from pytest_wedge.evidence.sample_store import KeptSample, SampleStore
from pytest_wedge.evidence.snapshot import Snapshot


def _snapshot(at: float) -> Snapshot:
    return Snapshot(taken_at=at, prefill=["prefill-0"], decode=["decode-0"], link_names=[])


def _kept(
    at: float, *, slow: bool = False, components: dict[str, str] | str | None = None
) -> KeptSample:
    return KeptSample(at, frame=sample_frame(slow, _snapshot(at)), components=components)


def test_a_sample_is_unpickled_once_when_first_read_with_the_runtimes_view() -> None:
    errors: list[str] = []
    store = SampleStore(10, errors.append)
    store.add(_kept(1.0), slow=False)
    store.add(_kept(2.0, slow=True, components={"router": "paused"}), slow=True)
    store.add(_kept(3.0, slow=True, components="TimeoutError: runtime"), slow=True)
    latest_slow = store.latest(2.5, slow=True)
    assert latest_slow is not None and latest_slow.taken_at == 2.0
    assert latest_slow.components == {"router": "paused"}
    assert store.latest(2.5, slow=True) is latest_slow, "decoded once, then kept"
    newest = store.latest(10.0, slow=True)
    assert newest is not None and newest.unanswered["components"] == "TimeoutError: runtime"
    assert [s.taken_at for s in store.samples()] == [1.0, 2.0, 3.0]
    assert [s.taken_at for s in store.samples(slow=True)] == [2.0, 3.0]
    assert store.latest(0.5, slow=False) is None and not errors


def test_a_first_sample_is_kept_only_before_any_other() -> None:
    store = SampleStore(10, lambda _: None)
    store.add_first(_snapshot(1.0))
    store.add_first(_snapshot(2.0))
    assert [s.taken_at for s in store.samples(slow=True)] == [1.0]


def test_a_frame_that_does_not_unpickle_is_counted_and_left_out() -> None:
    errors: list[str] = []
    store = SampleStore(10, errors.append)
    store.add(_kept(1.0), slow=True)
    store.add(KeptSample(2.0, frame=("sample", True, 2.0, pickle.dumps("no snapshot"))), slow=True)
    assert [s.taken_at for s in store.samples()] == [1.0]
    assert store.oldest_slow() is not None
    assert errors and "undecodable sample" in errors[0]


def test_reading_from_many_threads_gives_the_same_sample() -> None:
    kept = _kept(1.0)
    seen: list[Snapshot] = []
    threads = [threading.Thread(target=lambda: seen.append(kept.snapshot())) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(seen) == 8 and all(s == seen[0] for s in seen)
