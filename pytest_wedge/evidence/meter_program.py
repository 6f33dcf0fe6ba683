"""The link meter's sampling, out of the test process: a program the zygote forks.

It reads one JSON line on stdin (the :class:`~pytest_wedge.evidence.target.ProbeTarget`, the
interval and the series' bound), then samples every link's bytes on that interval exactly as
:class:`~pytest_wedge.evidence.linkrates.LinkMeter` does in a thread. It sends nothing until
asked: each further line on stdin is a request, answered with one frame (``sampler``'s
framing) of ``("series", errors, [(time, totals), ...])``. So the test process pays nothing
while the test runs, and one read when the timeline is drawn. End of input ends the program.

Toxiproxy's counters are read over one kept-alive ``http.client`` connection: the same URL and
parsing as :func:`~pytest_wedge.evidence.observe.link_bytes`, at a fifth of httpx's CPU per
request (a sync client four times a second needs none of httpx's pooling).
"""

from __future__ import annotations

import http.client
import json
import sys
from typing import TYPE_CHECKING, BinaryIO
from urllib.parse import urlsplit

from pytest_wedge.evidence.linkrates import LinkMeter
from pytest_wedge.evidence.parse import parse_link_bytes
from pytest_wedge.evidence.sampler import BAD_CONFIG, write_frame
from pytest_wedge.evidence.target import ProbeTarget, TargetTopology

if TYPE_CHECKING:
    from pytest_wedge.topology.running import Topology


class KeptAliveMeter(LinkMeter):
    """A :class:`LinkMeter` sampling in a thread of this program, Toxiproxy over one
    connection."""

    def __init__(self, topology: Topology, interval_s: float, maxlen: int) -> None:
        super().__init__(topology, interval_s, maxlen=maxlen, in_process=True)
        address = urlsplit(topology.toxiproxy.base_url)
        self._host, self._port = address.hostname or "127.0.0.1", address.port or 80
        self._by_proxy = {link.proxy: name for name, link in topology.links.items()}
        self._connection: http.client.HTTPConnection | None = None

    def closed_counters(self) -> dict[str, dict[str, float]]:
        if self._connection is None:
            self._connection = http.client.HTTPConnection(self._host, self._port, timeout=1.0)
        try:
            self._connection.request("GET", "/metrics")
            response = self._connection.getresponse()
            text = response.read().decode()
        except (OSError, http.client.HTTPException):
            self._connection.close()  # the next sample connects afresh
            self._connection = None
            raise
        if response.status >= 400:
            raise http.client.HTTPException(f"Toxiproxy answered {response.status}")
        return parse_link_bytes(text, self._by_proxy)


def serve(stdin: BinaryIO, stdout: BinaryIO) -> int:
    line = stdin.readline()
    try:
        config = json.loads(line)
        target = ProbeTarget.from_dict(config["target"])
        interval_s, maxlen = float(config["interval_s"]), int(config["maxlen"])
    except (ValueError, KeyError, TypeError) as exc:
        print(f"pytest-wedge link meter: the first line on stdin is not a meter configuration "
              f"({type(exc).__name__}: {exc}): {line[:200]!r}", file=sys.stderr)  # fmt: skip
        return BAD_CONFIG
    meter = KeptAliveMeter(TargetTopology(target).as_topology(), interval_s, maxlen).start()
    try:
        for _ in stdin:  # each line asks for the series so far; end of input ends the program
            write_frame(stdout, ("series", meter.errors, meter.series()))
    except BrokenPipeError:  # the owner closed its end: nobody is listening any more
        pass
    return 0
