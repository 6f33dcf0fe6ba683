"""Artifacts of one diagnosis: JSON, ledgers, stacks, component logs and the HTML timeline.

Layout of ``directory``::

    diagnosis.json        location, evidence, stuck, red_herrings, watchdogs, fault windows
    snapshot.json         the full evidence the locator ran on (re-run it offline)
    ledgers/client.json   the client ledger (pytest-wedge/client-ledger format)
    ledgers/<name>.json   each worker's ledger entries
    stacks.txt            only when stacks were taken
    logs/<name>.log       copies of the component logs
    timeline.html         self-contained timeline
    timeline.trace.json   the same as Chrome trace events (Perfetto, chrome://tracing)
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pytest_wedge.diagnostics.diagnosis import Diagnosis
from pytest_wedge.diagnostics.timeline import Mark, fault_dict, write_timeline
from pytest_wedge.evidence.linkrates import LinkRates
from pytest_wedge.evidence.snapshot import Snapshot
from pytest_wedge.evidence.stacks import render_stacks
from pytest_wedge.load.ledger import LEDGER_FORMAT, LEDGER_VERSION

# Logs can be large after a long session; the tail is what a wedge report needs.
MAX_LOG_BYTES = 2 * 1024 * 1024


def _copy_tail(source: Path, target: Path) -> None:
    size = source.stat().st_size
    if size <= MAX_LOG_BYTES:
        shutil.copyfile(source, target)
        return
    with source.open("rb") as src, target.open("wb") as dst:
        src.seek(size - MAX_LOG_BYTES)
        dst.write(f"[... first {size - MAX_LOG_BYTES} bytes cut ...]\n".encode())
        shutil.copyfileobj(src, dst)


def write_artifacts(
    directory: str | Path,
    diagnosis: Diagnosis,
    snapshot: Snapshot,
    samples: Sequence[Snapshot] = (),
    fault_windows: Iterable[Any] = (),
    watchdogs: Sequence[dict[str, Any]] = (),
    *,
    stacks: dict[str, str] | None = None,
    link_rates: LinkRates | None = None,
    title: str | None = None,
    failure: str | None = None,
    marks: Iterable[Mark] = (),
) -> Path:
    """Write every artifact under ``directory`` (created); returns the directory. The last four
    keywords go to the timeline (see :func:`~pytest_wedge.diagnostics.timeline.write_timeline`)."""
    out = Path(directory)
    (out / "ledgers").mkdir(parents=True, exist_ok=True)
    faults = [fault_dict(w) for w in fault_windows]
    summary = diagnosis.to_dict()
    summary["watchdogs"] = [*diagnosis.watchdogs, *watchdogs]
    summary["faults"] = faults
    summary["rendered"] = diagnosis.render()
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
                _copy_tail(source, out / "logs" / f"{name}.log")
    write_timeline(out, diagnosis, snapshot, faults, watchdogs, samples, link_rates=link_rates,
                   title=title, failure=failure, marks=marks)  # fmt: skip
    return out
