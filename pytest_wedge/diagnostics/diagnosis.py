"""The answer to "where is the wedge": data, its JSON form and its terminal rendering."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, TypedDict

from pytest_wedge.evidence.observed import ClientRecord, known_fields, read_document

DIAGNOSIS_FORMAT = "pytest-wedge/diagnosis"
LOCATIONS_DOC = (
    "client, client->router, router, router->prefill-i, prefill-i, decode-j->prefill-i, "
    "router->decode-j, decode-j, or none"
)
# certain: direct observation decided it; likely: inference by elimination; unknown: the best
# guess, with no evidence to back it. "certain and wrong" is the defect the bench counts.
CONFIDENCES = ("certain", "likely", "unknown")
MAX_DETAILS = 500  # request rows a diagnosis keeps
RESTART_SLACK_S = 2.0  # a component this fresh was still starting when the request came


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


def count_line(origin: str, mine: list[ClientRecord], wedged: list[ClientRecord], when: str) -> str:
    """How many of ``origin``'s requests were sent, overdue and failed (``when``)."""
    sent = sum(1 for r in mine if r.get("sent") is not None)
    failed = sum(1 for r in wedged if r.get("state") != "pending")
    return (
        f"{len(mine)} {origin} requests: {sent} sent, {len(mine) - sent} never left the "
        f"client; {len(wedged) - failed} overdue, {failed} failed {when}"
    )


def tally(head: str, items: Iterable[str]) -> str:
    """``held at: router 3, decode-0 1``: the most common first."""
    return f"{head}: " + ", ".join(f"{k} {n}" for k, n in Counter(items).most_common())


def client_errors(wedged: list[ClientRecord]) -> list[str]:
    """The two most common errors the client got."""
    errors = Counter(str(r.get("error"))[:120] for r in wedged if r.get("error"))
    return [f"client error ({n} x): {text}" for text, n in errors.most_common(2)]


def window_rate(tokens: float, first: float, end: float, now: float, window_s: float) -> float:
    """Tokens per second a stream from ``first`` to ``end`` added to ``window_s`` before now."""
    overlap = max(0.0, min(end, now) - max(first, now - window_s))
    return tokens / max(end - first, 1e-3) * overlap / window_s


def other_origins(origin: str, rates: Mapping[str, float], active: Mapping[str, int]) -> list[str]:
    """Origins but ``origin`` with requests active or at least 0.5 tok/s, by name."""
    busy = {o for o in {*rates, *active} if active.get(o) or rates.get(o, 0.0) >= 0.5}
    return sorted(busy - {origin})


def herring(parts: list[str], origin: str) -> str:
    return "; ".join(parts) + f" (other origins' activity, not progress of {origin})"


def _section(head: str, items: Iterable[str]) -> list[str]:
    """``head`` and ``items`` as a bullet list; nothing without items."""
    bullets = [f"  - {item}" for item in items]
    return [head, *bullets] if bullets else []


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

    @classmethod
    def of(
        cls, r: ClientRecord, age_s: float, furthest: str, holding: str, note: str
    ) -> RequestDetail:
        rid, origin, state = r.get("request_id", "?"), r.get("origin", "?"), r.get("state", "?")
        return cls(rid, origin, state, round(age_s, 3), furthest, holding, note)


@dataclass
class Diagnosis:
    """``location`` is one hop (:data:`LOCATIONS_DOC`), ``stuck`` {hop: {origin: n}};
    ``decided_by`` the lines that decided it, ``ruled_out`` the competing hops with why."""

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
    window_start: float | None = None  # blind: the onset it inferred from the client ledger
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
        lines = [self.headline(), *_section(f"decided by ({self.confidence}):", self.decided_by)]
        lines += _section("ruled out:", self.ruled_out)
        if self.disagrees():
            assert self.oracle is not None
            lines.append(
                f"the oracle (ground truth: stub ledgers, faults) says "
                f"{self.oracle['location']}: {self.oracle['headline']}"
            )
        lines += _section("evidence:", self.evidence)
        if self.stuck:
            lines.append("stuck (hop: origin=count):")
            for hop, origins in self.stuck.items():
                counts = ", ".join(f"{o}={n}" for o, n in sorted(origins.items()))
                lines.append(f"  {hop}: {counts}")
        lines.append("red herrings (activity of other origins):")
        lines += [f"  - {h}" for h in self.red_herrings] or ["  - none seen"]
        lines += _section(
            "watchdog firings:",
            (
                f"{w.get('component', '?')}: {w.get('watchdog')} for {w.get('request_id')}"
                for w in self.watchdogs[:10]
            ),
        )
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
