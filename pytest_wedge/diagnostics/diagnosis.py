"""The answer to "where is the wedge": data, its JSON form and its terminal rendering."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

DIAGNOSIS_FORMAT = "pytest-wedge/diagnosis"
LOCATIONS_DOC = (
    "client, client->router, router, router->prefill-i, prefill-i, decode-j->prefill-i, "
    "router->decode-j, decode-j, or none"
)
# certain: direct observation decided it; likely: inference by elimination; unknown: the best
# guess, with no evidence to back it. "certain and wrong" is the defect the bench counts.
CONFIDENCES = ("certain", "likely", "unknown")


@dataclass
class RequestDetail:
    request_id: str
    origin: str
    state: str
    age_s: float
    furthest: str
    holding: str
    note: str = ""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestDetail:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class Diagnosis:
    """``location`` is one hop (see :data:`LOCATIONS_DOC`); ``stuck`` is {hop: {origin: n}}.

    ``locator`` says who answered: ``blind`` (from what an operator observes) or ``oracle``
    (the ledger walk over ground truth). ``confidence`` is one of :data:`CONFIDENCES`;
    ``decided_by`` holds the evidence lines that decided the location and ``ruled_out`` the
    competing hypotheses with why. ``oracle`` holds the oracle's answer when it disagrees.
    """

    location: str
    origin: str
    evidence: list[str] = field(default_factory=list)
    stuck: dict[str, dict[str, int]] = field(default_factory=dict)
    red_herrings: list[str] = field(default_factory=list)
    requests: list[RequestDetail] = field(default_factory=list)
    wedged: int = 0
    total: int = 0
    taken_at: float = 0.0
    overdue_after_s: float = 1.0
    watchdogs: list[dict[str, Any]] = field(default_factory=list)
    unanswered: dict[str, str] = field(default_factory=dict)
    confidence: str = "certain"
    decided_by: list[str] = field(default_factory=list)
    ruled_out: list[str] = field(default_factory=list)
    locator: str = "oracle"
    window_start: float | None = None
    oracle: dict[str, Any] | None = None

    @property
    def healthy(self) -> bool:
        return self.location == "none"

    def to_dict(self) -> dict[str, Any]:
        return {"format": DIAGNOSIS_FORMAT, **asdict(self)}

    def to_json(self, *, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Diagnosis:
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in known}
        kwargs["requests"] = [RequestDetail.from_dict(r) for r in data.get("requests", [])]
        return cls(**kwargs)

    @classmethod
    def from_json(cls, text: str) -> Diagnosis:
        data = json.loads(text)
        if data.get("format") != DIAGNOSIS_FORMAT:
            raise ValueError(f"not a {DIAGNOSIS_FORMAT} document (format={data.get('format')!r})")
        return cls.from_dict(data)

    def headline(self) -> str:
        if self.healthy:
            return (
                f"no wedge: none of {self.total} {self.origin} requests is overdue "
                f"(> {self.overdue_after_s:g} s) or failed recently"
            )
        sure = f" ({self.confidence})" if self.locator == "blind" else ""
        return (
            f"wedge located at {self.location}{sure}: {self.wedged} of {self.total} "
            f"{self.origin} requests wedged"
        )

    def disagrees(self) -> bool:
        return self.oracle is not None and self.oracle.get("location") != self.location

    def render(self, *, max_requests: int = 10) -> str:
        """Text for the terminal and the report section."""
        lines = [self.headline()]
        if self.decided_by:
            lines.append(f"decided by ({self.confidence}):")
            lines += [f"  - {fact}" for fact in self.decided_by]
        if self.ruled_out:
            lines.append("ruled out:")
            lines += [f"  - {why}" for why in self.ruled_out]
        if self.disagrees():
            assert self.oracle is not None
            lines.append(
                f"the oracle (ground truth: stub ledgers, faults) says "
                f"{self.oracle.get('location')}: {self.oracle.get('headline', '')}"
            )
        if self.evidence:
            lines.append("evidence:")
            lines += [f"  - {fact}" for fact in self.evidence]
        if self.stuck:
            lines.append("stuck (hop: origin=count):")
            for hop, origins in self.stuck.items():
                counts = ", ".join(f"{o}={n}" for o, n in sorted(origins.items()))
                lines.append(f"  {hop}: {counts}")
        lines.append("red herrings (activity of other origins):")
        lines += [f"  - {h}" for h in self.red_herrings] or ["  - none seen"]
        if self.watchdogs:
            lines.append("watchdog firings:")
            lines += [
                f"  - {w.get('component', '?')}: {w.get('watchdog')} for {w.get('request_id')}"
                for w in self.watchdogs[:10]
            ]
        if self.requests:
            shown = self.requests[:max_requests]
            lines.append(f"requests ({len(shown)} of {len(self.requests)}):")
            rows = [("request_id", "state", "age", "furthest", "held at", "note")]
            rows += [
                (r.request_id, r.state, f"{r.age_s:.1f}s", r.furthest, r.holding, r.note)
                for r in shown
            ]
            widths = [max(len(row[i]) for row in rows) for i in range(5)]
            for row in rows:
                cells = [c.ljust(w) for c, w in zip(row[:5], widths, strict=True)]
                lines.append(("  " + "  ".join(cells) + "  " + row[5]).rstrip())
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.render()
