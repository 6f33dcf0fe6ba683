"""Where requests that already failed were held: the client's error read with the router's
counters, breakers and health gauges and the workers' own /health. smg's error bodies name a
code and, for transport errors, the upstream URL: the listen side of a ``router->X`` link."""

from __future__ import annotations

from pytest_wedge.diagnostics.blind.clientside import Phase
from pytest_wedge.diagnostics.blind.rules import router_down
from pytest_wedge.diagnostics.blind.servers import (
    CERTAIN,
    LIKELY,
    UNKNOWN,
    Servers,
    Verdict,
    Worker,
)
from pytest_wedge.evidence.observed import RouterMetrics

BOOTSTRAP_REFUSED = "the prefill's bootstrap server answered (it refused)"
ANSWERED_WITH_AN_ERROR = (
    "bootstrap server answered the KV fetch with an error "
    "(the handshakes failed over links that carry /health)"
)


def _router_errors(s: Servers, worker_type: str, error_type: str | None = None) -> float:
    """Errors (of ``error_type``, or any) the router counted against ``worker_type`` in the
    window (smg_worker_errors_total)."""

    def total(metrics: RouterMetrics) -> float:
        return sum(
            r["value"]
            for r in metrics.get("errors", [])
            if r["worker_type"] == worker_type and error_type in (None, r["error_type"])
        )

    return max(0.0, total(s.obs.router) - total(s.obs.router_before))


def _opened_by(s: Servers) -> tuple[Worker, str] | None:
    """The worker whose failures in the current window opened the breakers, when the public
    counters single one out; after such a window the breakers refuse because of it."""
    if not any(w.failed > 0 for w in s.workers.values()):
        return None  # nothing failed in this window: the breakers were open before it
    for d in s.role("decode"):
        refused = s.obs.grew(d.name, "num_bootstrap_failed_reqs")
        p = s.failing("prefill") or s.cancelled("prefill", refused)
        if refused and p is not None:
            handshakes = f"{refused:g} failed bootstrap handshakes with {p.name}"
            return p, f"{d.name} counted {handshakes} in the window (num_bootstrap_failed_reqs)"
    by_role = {role: _router_errors(s, role) for role in ("prefill", "decode")}
    for role, other in (("prefill", "decode"), ("decode", "prefill")):
        if by_role[role] and not by_role[other] and (w := s.failing(role)) is not None:
            errors = f"{by_role[role]:g} {role} errors in the window (smg_worker_errors_total)"
            return w, f"the router counted {errors}, against {w.name}"
    return _failed_beside_aborts(s)


def _failed_beside_aborts(s: Servers) -> tuple[Worker, str] | None:
    """smg counts one PD failure against both workers of the pair; the one that did not fail
    had its leg cancelled by the router, and its engine counted the aborts."""
    aborted = {w.name: s.aborted(w) for w in s.workers.values()}
    for role, other in (("prefill", "decode"), ("decode", "prefill")):
        culprit = s.failing(role)
        partners = [w for w in s.role(other) if w.failed > 0]
        if culprit is None or not culprit.failed or not partners:
            continue
        if aborted[culprit.name] < culprit.failed / 2 and all(
            aborted[p.name] >= p.failed / 2 for p in partners
        ):
            cut = ", ".join(f"{p.name} {aborted[p.name]:g}" for p in partners)
            counted = f"{culprit.failed:g} failures against {culprit.name} and its partners"
            aborts = f"sglang:num_aborted_requests: {cut}; {culprit.name} {aborted[culprit.name]:g}"
            return culprit, (
                f"the router counted {counted}, whose legs it cancelled (aborts in the window, "
                f"{aborts})"
            )
    return None


def _refused_for(
    s: Servers, refusing: str, since: float | None
) -> tuple[Verdict | None, list[str]]:
    """What keeps the router's workers away, before the breakers are read: a dead or silent
    worker, or (when no worker restarted in the window) a link. Also the restarts."""
    for w in s.workers.values():
        if w.dead:
            return s.verdict(w.name, CERTAIN, f"{w.name} process {w.dead}", refusing), []
    for w in s.workers.values():
        if w.silent:
            why = f"{w.name} does not answer /health on its own port"
            return s.verdict(w.name, LIKELY, why, refusing), []
    # A worker that restarted in the window is back: what broke while it was away (breakers,
    # transfers) says nothing about a link.
    back = [
        f"{w.name} restarted in the window (at {t:.2f})"
        for w in s.workers.values()
        if (t := s.restarted(w.name, since)) is not None
    ]
    return (None if back else _refused_over_a_link(s, refusing)), back


def _refused_over_a_link(s: Servers, refusing: str) -> Verdict | None:
    links = [link for link in s.obs.link_names if link != "client->router"]
    if (v := s.broken_path(links)) is not None:
        v.because.append(refusing)
        return v
    for link in links:
        if (gap := s.swallowed_line(link)) is None:
            continue
        if (answered := s.read_answers_over(link)) is not None:
            s.rule_out(link, answered)
            continue
        return s.verdict(link, LIKELY, gap, refusing)
    for d in s.role("decode"):
        if d.transfer_broken:  # transfers broke on the wire, which opened the breakers
            p = s.failing("prefill")
            broke = f"{d.transfer_broken:g} KV transfers that broke in the window"
            link = f"{d.name}->{(p or s.role('prefill')[0]).name}"
            said = f"{d.name} counted {broke} (num_transfer_failed_reqs)"
            return s.verdict(link, LIKELY if p else UNKNOWN, refusing, said)
    return None


def _refused_by_router(s: Servers, ph: Phase, n: int, since: float | None) -> Verdict:
    answered = f"{n} requests answered {ph.status} no_available_workers"
    refusing = (
        f"the router refuses for want of workers ({n} answered {ph.status} no_available_workers)"
    )
    found, back = _refused_for(s, refusing, since)
    if found is not None:
        return found
    opened = [w.name for w in s.workers.values() if w.cb_open]
    breakers = f"open breakers: {', '.join(opened)} (smg_worker_cb_state=1)"
    if opened and not back and (cause := _opened_by(s)) is not None:
        # Whether it still fails cannot be seen while the breakers keep traffic off it.
        w, why = cause
        return s.verdict(w.name, LIKELY, why, breakers, refusing)
    renewed = [w for w in s.workers.values() if s.restarted(w.name, since) is not None]
    if opened and len(renewed) == 1 and (renewed[0].cb_open or renewed[0].failed > 0):
        # One worker restarted: the requests its old process held failed, and those failures
        # opened the breakers. The router refuses because of it.
        w = renewed[0]
        lost = f"{back[0]}: the requests its old process held failed and opened the breakers"
        return s.verdict(w.name, LIKELY, lost, breakers, refusing)
    sick = [w.name for w in s.workers.values() if not w.router_healthy]
    healthy = [d.name for d in s.role("decode") if d.answers]
    for w in s.workers.values():
        s.rule_out(w.name, "its process runs and it answers /health on its own port")
    why = "breakers open" if opened else "workers marked unhealthy" if sick else "no workers"
    are = "is" if len(healthy) == 1 else "are"
    lines = [f"router refuses ({why}) while {' and '.join(healthy) or 'no decode'} {are} healthy"]
    if opened:
        lines.append(breakers)
    if sick:
        lines.append(f"marked unhealthy by the router: {', '.join(sick)} (smg_worker_health=0)")
    lines.append(answered)
    # Failures counted against workers in this window opened the breakers, and whether their
    # cause persists cannot be seen while the breakers keep traffic off them.
    failed = [w.name for w in s.workers.values() if w.failed > 0]
    if failed:
        counted = f"the router counted failures against {', '.join(failed)} in the window"
        lines.append(
            f"{counted} (smg_worker_cb_outcomes_total): whether they still fail cannot be seen"
        )
    short = s.window_misses_onset()
    if short:  # "nothing failed in the window" says nothing of a window that began late
        lines.append(short)
    sure = CERTAIN if (opened or sick) and not failed and not short else LIKELY
    return s.verdict("router", sure, *lines, *back)


def _bootstrap_refused(s: Servers, d: Worker) -> bool:
    """``d``'s failed transfers were all handshakes over links that carry /health to the
    prefills' bootstrap servers: those answered the KV fetch, and refused it."""
    links = [f"via {d.name}->{p.name}" for p in s.role("prefill")]
    return d.transfer_broken == 0 and all(s.obs.health.get(link) == "ok" for link in links)


def _transfer_failed(s: Servers, ph: Phase, n: int) -> Verdict | None:
    failing = sorted(
        (d for d in s.role("decode") if d.transfer_failures > 0), key=lambda d: -d.transfer_failures
    )
    if not failing:
        return None
    d = failing[0]
    failed = f"{d.transfer_failures:g} failed KV transfers in the window"
    line = f"{d.name} counted {failed} (num_bootstrap_failed_reqs, num_transfer_failed_reqs)"
    # A transfer link that does not carry /health is seen; a prefill still holding requests
    # whose KV could not leave only looks like one that stalled.
    if (v := s.broken_path([f"{d.name}->{p.name}" for p in s.role("prefill")])) is not None:
        v.because.append(line)
        return v
    # A prefill whose process is gone took the KV being fetched from it along.
    if gone := [p for p in s.role("prefill") if p.dead]:
        sure = CERTAIN if len(s.role("prefill")) == 1 else LIKELY
        return s.verdict(gone[0].name, sure, f"{gone[0].name} process {gone[0].dead}", line)
    # Their KV never became ready and the transfers only timed out waiting for it: then the
    # prefill holds about as many as the decode failed, not the one or two any loaded prefill has.
    if (v := still_prefilling(s, max(n, d.transfer_failures), line)) is not None:
        return v
    p = s.failing("prefill")
    if _bootstrap_refused(s, d):
        if p is None and (c := s.cancelled("prefill", d.transfer_failures)) is not None:
            s.rule_out(f"{d.name}->{c.name}", BOOTSTRAP_REFUSED)
            answered = f"a prefill's {ANSWERED_WITH_AN_ERROR}"
            aborts = (
                f"{s.aborted(c):g} aborted requests in the window (sglang:num_aborted_requests)"
            )
            cancelled = "the other prefills about none: its legs were the ones cancelled"
            return s.verdict(
                c.name, LIKELY, line, answered, f"{c.name} counted {aborts}, {cancelled}"
            )
        if p is None:
            which = "a prefill's bootstrap server refused the fetch; which one cannot be told"
            return s.verdict(s.role("prefill")[0].name, UNKNOWN, line, which)
        s.rule_out(f"{d.name}->{p.name}", BOOTSTRAP_REFUSED)
        answered = f"{p.name}'s {ANSWERED_WITH_AN_ERROR}"
        counted = f"{p.name} is the prefill the router counted the failures against"
        return s.verdict(p.name, CERTAIN, line, answered, counted)
    named = s.obs.named_url(ph.url) if ph.url else None
    if named and named.startswith(f"{d.name}->"):
        return s.verdict(named, CERTAIN, line, f"the error names {named}'s address")
    if p is not None:
        counted = f"{p.name} is the prefill the router counted them against"
        return s.verdict(
            f"{d.name}->{p.name}", LIKELY, line, f"{n} requests answered {ph.status}; {counted}"
        )
    if (c := s.cancelled("prefill", 1.0)) is not None:
        # The prefill whose KV the decode failed to take had those legs cancelled.
        aborts = f"(sglang:num_aborted_requests +{s.aborted(c):g})"
        alone = f"{c.name} alone counted aborted requests in the window {aborts}"
        return s.verdict(f"{d.name}->{c.name}", LIKELY, line, alone)
    which = "which prefill's transfer failed cannot be told"
    return s.verdict(f"{d.name}->{s.role('prefill')[0].name}", UNKNOWN, line, which)


def still_prefilling(s: Servers, n: float, *because: str) -> Verdict | None:
    """One prefill still holds about as many of the router's requests queued or prefilling, in
    both samples, as failed: it stalled, and whoever gave up waiting on it (the decode's KV
    fetch, the router's deadline) only shows where it was waited on. Pending, the same
    requests are located at that prefill; failed, they stay there."""
    stalled = [
        p
        for p in s.role("prefill")
        if p.metrics_read and p.prefilling_for_router >= max(1.0, n / 2)
    ]
    if len(stalled) != 1:
        return None
    p = stalled[0]
    held = f"{p.name} still holds {p.queued:g} queued and {p.running:g} prefilling in both samples"
    return s.verdict(p.name, LIKELY, *because, f"{held}: it never finished them", p.load_line())


def _status(s: Servers, ph: Phase, n: int, since: float | None) -> Verdict:
    head = f"{n} requests answered {ph.status} {ph.code or ''}".rstrip()
    if ph.code == "no_available_workers":
        return _refused_by_router(s, ph, n, since)
    if ph.code in ("admission_queue", "pd_prefill_queue"):
        return s.verdict("router", CERTAIN, head, "the router's admission refused them")
    if (v := _transfer_failed(s, ph, n)) is not None:
        return v
    if ph.code.startswith(("prefill", "decode")):
        role = ph.code.split("_")[0]
        w = s.failing(role)
        if w is None:
            which = f"which {role} failed cannot be told"
            return s.verdict(s.role(role)[0].name, UNKNOWN, head, which)
        counted = f"{w.name} is the {role} it counted the failures against"
        return s.verdict(w.name, CERTAIN, head, f"the router says the {role} failed; {counted}")
    named = s.obs.named_url(ph.url) if ph.url else None
    if named is not None:
        target = named.split("->", 1)[1] if "->" in named else named
        w = s.workers.get(target)
        if w is not None and w.dead:
            return s.verdict(target, CERTAIN, head, f"{target} process {w.dead}")
        if w is not None and w.role == "prefill" and (v := still_prefilling(s, n, head)):
            return v  # the router gave up waiting on a prefill that holds them
        if w is not None and w.answers:
            s.rule_out(target, "it answers /health on its own port")
            unreached = f"the router could not reach {target} at its link address {ph.url}"
            answers = f"while {target} answers /health on its own port"
            return s.verdict(f"router->{target}", CERTAIN, head, f"{unreached}, {answers}")
        return s.verdict(target, LIKELY, head, f"{target} does not answer /health")
    return s.verdict("router", UNKNOWN, head, "the error names no component")


def held_failed(s: Servers, ph: Phase, n: int, since: float | None) -> Verdict:
    """``n`` requests of the current window that failed the same way."""
    if ph.detail == "refused":
        alive = "; the router itself answers /health on its own port" if s.router_answers else ""
        refused = "could not connect to the router's front address (connection refused)"
        return s.verdict("client->router", CERTAIN, f"{n} requests {refused}{alive}")
    if ph.detail == "status":
        return _status(s, ph, n, since)
    if (v := router_down(s)) is not None:
        return v
    if ph.detail == "broken":
        if (v := s.broken_path(["client->router"])) is not None:
            return v
        broke = f"{n} connections to the router broke"
        started = s.restarted("router", since)
        if started is not None:
            anew = f"the router process started anew in the window (at {started:.2f})"
            return s.verdict("router", CERTAIN, f"{broke}, and {anew}")
        runs = "the router process runs and answers /health on its own port"
        return s.verdict(
            "client->router", LIKELY, f"{broke} after the request was sent, while {runs}"
        )
    if ph.detail in ("stream timeout", "stream error"):
        return _stream_broke(s, ph, n, since)
    return s.verdict("router", UNKNOWN, f"{n} requests failed: {ph.code or ph.detail}")


def _stream_broke(s: Servers, ph: Phase, n: int, since: float | None) -> Verdict:
    """Streams that had tokens and then ended in an error: where did the bytes stop?"""
    timeouts = _router_errors(s, "decode", "timeout")
    line = f"{n} streams broke after tokens ({ph.detail})" + (
        f"; smg_worker_errors_total{{decode,timeout}} +{timeouts:g}" if timeouts else ""
    )
    decodes = s.role("decode")
    if (v := s.broken_path(["client->router"])) is not None:
        return v
    for d in decodes:
        if d.dead:
            return s.verdict(d.name, CERTAIN, line, f"{d.name} process {d.dead}")
        if (started := s.restarted(d.name, since)) is not None:
            anew = f"{d.name}'s process started anew in the window (at {started:.2f})"
            return s.verdict(d.name, CERTAIN, line, f"{anew}: its streams broke with it")
    if (started := s.restarted("router", since)) is not None:
        anew = f"the router process started anew in the window (at {started:.2f})"
        return s.verdict("router", CERTAIN, line, f"{anew}: the streams through it broke with it")
    if (v := s.broken_path([f"router->{d.name}" for d in decodes])) is not None:
        v.because.insert(0, line)
        return v
    for link in ["client->router", *(f"router->{d.name}" for d in decodes)]:
        if (gap := s.swallowed_line(link)) is not None:
            return s.verdict(link, LIKELY, line, gap)
    stopped = s.failing("decode")
    if stopped is not None:
        one = len(decodes) == 1
        why = "the only decode" if one else "the decode the router counted failures against"
        back = "stopped its streams, and no link on the way back shows trouble"
        return s.verdict(stopped.name, LIKELY, line, f"{stopped.name} ({why}) {back}")
    return s.verdict(decodes[0].name, UNKNOWN, line, "which decode's streams broke cannot be told")
