"""The answer to "where is the wedge": data, its JSON form and its terminal rendering."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, TypedDict

from pytest_wedge.evidence.observed import known_fields, read_document

DIAGNOSIS_FORMAT = "pytest-wedge/diagnosis"
LOCATIONS_DOC = (
    "client, client->router, router, router->prefill-i, prefill-i, decode-j->prefill-i, "
    "router->decode-j, decode-j, or none"
)
# certain: direct observation decided it; likely: inference by elimination; unknown: the best
# guess, with no evidence to back it. "certain and wrong" is the defect the bench counts.
CONFIDENCES = ("certain", "likely", "unknown")


def hop_order(prefill: list[str], decode: list[str]) -> list[str]:
    """Every hop in the order a request meets it: upstream first (ties go there)."""
    hops = ["client", "client->router", "router"]
    hops += [h for p in prefill for h in (f"router->{p}", p)]
    hops += [f"{d}->{p}" for d in decode for p in prefill]
    hops += [h for d in decode for h in (f"router->{d}", d)]
    return hops


def place(
    held: Iterable[tuple[str, str]], origin: str, prefill: list[str], decode: list[str]
) -> tuple[str, dict[str, dict[str, int]]]:
    """From (hop, origin) per wedged request: the hop holding most of ``origin``'s (ties go
    upstream; ``none`` without any), and {hop: {origin: n}} in hop order."""
    order = {hop: i for i, hop in enumerate(hop_order(prefill, decode))}

    def rank(hop: str) -> int:
        return order.get(hop, len(order))

    stuck: dict[str, dict[str, int]] = {}
    counts: Counter[str] = Counter()
    for hop, who in held:
        by_origin = stuck.setdefault(hop, {})
        by_origin[who] = by_origin.get(who, 0) + 1
        counts[hop] += who == origin
    location = min(
        (h for h in counts if counts[h]), key=lambda h: (-counts[h], rank(h)), default="none"
    )
    return location, dict(sorted(stuck.items(), key=lambda kv: rank(kv[0])))


class WatchdogFiring(TypedDict, total=False):
    """An engine watchdog's firing, with the component it fired on."""

    component: str
    watchdog: str
    at: float
    request_id: str
    room: int | None


class OracleAnswer(TypedDict):
    """The oracle's answer, kept beside the blind one when the two disagree."""

    location: str
    headline: str
    stuck: dict[str, dict[str, int]]
    evidence: list[str]


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
    def from_dict(cls, data: Mapping[str, Any]) -> RequestDetail:
        return cls(**known_fields(cls, data))


@dataclass
class Diagnosis:
    """``location`` is one hop (see :data:`LOCATIONS_DOC`); ``stuck`` is {hop: {origin: n}};
    ``locator`` is ``blind`` or ``oracle``; ``decided_by`` holds the lines that decided the
    location and ``ruled_out`` the competing hypotheses with why."""

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
    watchdogs: list[WatchdogFiring] = field(default_factory=list)
    unanswered: dict[str, str] = field(default_factory=dict)
    confidence: str = "certain"
    decided_by: list[str] = field(default_factory=list)
    ruled_out: list[str] = field(default_factory=list)
    locator: str = "oracle"
    window_start: float | None = None
    oracle: OracleAnswer | None = None

    @property
    def healthy(self) -> bool:
        return self.location == "none"

    def to_dict(self) -> dict[str, object]:
        return {"format": DIAGNOSIS_FORMAT, **asdict(self)}

    def to_json(self, *, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Diagnosis:
        kwargs = known_fields(cls, data)
        kwargs["requests"] = [RequestDetail.from_dict(r) for r in data.get("requests", [])]
        return cls(**kwargs)

    @classmethod
    def from_json(cls, text: str) -> Diagnosis:
        return cls.from_dict(read_document(text, DIAGNOSIS_FORMAT))

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
        return self.oracle is not None and self.oracle["location"] != self.location

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
                f"{self.oracle['location']}: {self.oracle['headline']}"
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
