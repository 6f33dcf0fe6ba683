"""Artifacts of one diagnosis: ``diagnosis.json``, ``snapshot.json`` (re-run either locator
offline), ``ledgers/``, ``stacks.txt``, ``logs/`` (from the test's start) and the timeline."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_wedge.diagnostics.diagnosis import Diagnosis
from pytest_wedge.diagnostics.timeline import Mark, write_timeline
from pytest_wedge.evidence.snapshot import Snapshot
from pytest_wedge.evidence.stacks import render_stacks
from pytest_wedge.evidence.truth import FaultRecord, FaultWindow, window_record
from pytest_wedge.links.rates import LinkRates
from pytest_wedge.load.client_ledger import LEDGER_FORMAT, LEDGER_VERSION

if TYPE_CHECKING:
    from pytest_wedge.topology.running import Topology

# Logs can be large after a long session; the tail is what a wedge report needs.
MAX_LOG_BYTES = 2 * 1024 * 1024


def log_offsets(topology: Topology) -> dict[str, int]:
    """How long each component's log is now: a test's own part of it starts there."""
    offsets = {}
    for name in topology.components:
        path = topology.runtime.log_path(name)
        if path:
            try:
                offsets[name] = Path(path).stat().st_size
            except OSError:  # not written yet: the whole log is the test's
                offsets[name] = 0
    return offsets


def _copy_window(source: Path, target: Path, start: int = 0) -> None:
    """Copy ``source`` from byte ``start`` (the test's window), at most its last 2 MB."""
    size = source.stat().st_size
    if start > size:  # the log was replaced (a new session): all of it is new
        start = 0
    begin = max(start, size - MAX_LOG_BYTES)
    with source.open("rb") as src, target.open("wb") as dst:
        if start:
            dst.write(f"[... {start} bytes before this test left out ...]\n".encode())
        if begin > start:
            dst.write(f"[... {begin - start} more bytes of this test cut ...]\n".encode())
        src.seek(begin)
        shutil.copyfileobj(src, dst)


def write_artifacts(
    directory: str | Path,
    diagnosis: Diagnosis,
    snapshot: Snapshot,
    samples: Sequence[Snapshot] = (),
    fault_windows: Iterable[FaultWindow | FaultRecord] = (),
    watchdogs: Sequence[Mapping[str, object]] = (),
    *,
    stacks: dict[str, str] | None = None,
    link_rates: LinkRates | None = None,
    title: str | None = None,
    failure: str | None = None,
    marks: Iterable[Mark] = (),
    started: float | None = None,
    log_offsets: dict[str, int] | None = None,
    context: Mapping[str, object] | None = None,
) -> Path:
    """Write every artifact under ``directory``; ``log_offsets`` cut each log to the test's
    window, ``context`` goes into ``diagnosis.json``, the other keywords to the timeline."""
    out = Path(directory)
    (out / "ledgers").mkdir(parents=True, exist_ok=True)
    faults = [window_record(w) for w in fault_windows]
    summary = diagnosis.to_dict()
    summary["watchdogs"] = [*diagnosis.watchdogs, *watchdogs]
    summary["faults"] = faults
    summary["rendered"] = diagnosis.render()
    summary.update(context or {})
    (out / "diagnosis.json").write_text(json.dumps(summary, indent=2, default=str))
    (out / "snapshot.json").write_text(snapshot.to_json())
    client = {"format": LEDGER_FORMAT, "version": LEDGER_VERSION, "records": snapshot.client}
    (out / "ledgers" / "client.json").write_text(json.dumps(client, indent=1))
    for name, entries in snapshot.ledgers.items():
        (out / "ledgers" / f"{name}.json").write_text(json.dumps(entries, indent=1))
    if stacks is not None:
        (out / "stacks.txt").write_text(render_stacks(stacks))
    if snapshot.log_paths:
        (out / "logs").mkdir(exist_ok=True)
        for name, path in snapshot.log_paths.items():
            source = Path(path)
            if source.is_file():
                start = (log_offsets or {}).get(name, 0)
                _copy_window(source, out / "logs" / f"{name}.log", start)
    write_timeline(
        out,
        diagnosis,
        snapshot,
        faults,
        watchdogs,
        samples,
        link_rates=link_rates,
        title=title,
        failure=failure,
        marks=marks,
        started=started,
    )
    return out
