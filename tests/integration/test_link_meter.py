"""The links are metered with each probe sample (``on_sample``): Toxiproxy's counters for closed
connections plus ``ss``'s for open ones, so the lanes show traffic on connections that stay
open; each point is stamped with its sample's moment, the first one as the test starts, and the
series outlives the probe's stop for the timeline."""

from __future__ import annotations

import shutil
import socket

import pytest

from pytest_wedge.evidence.probe import Probe
from pytest_wedge.links.rates import SOURCE_BOTH, LinkMeter, open_socket_bytes
from pytest_wedge.waiting import wait_for

pytestmark = pytest.mark.timeout(120)
needs_ss = pytest.mark.skipif(shutil.which("ss") is None, reason="ss (iproute2) not installed")


@needs_ss
def test_ss_counts_the_accepted_sides_bytes_of_the_asked_ports_only() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as client:
            accepted, _ = server.accept()
            with accepted:
                client.sendall(b"u" * 1234)
                got = 0
                while got < 1234:
                    got += len(accepted.recv(65536))
                accepted.sendall(b"d" * 5678)
                got = 0
                while got < 5678:
                    got += len(client.recv(65536))
                expected = {"link": {"upstream": 1234.0, "downstream": 5678.0}}
                # The client's ACK of the last bytes may trail its recv() by a moment.
                wait_for(
                    lambda: open_socket_bytes({port: "link"}) == expected,
                    timeout_s=5,
                    what="the accepted socket's counters",
                    describe=lambda: repr(open_socket_bytes({port: "link"})),
                )
                others = {p: f"other-{p}" for p in range(40000, 40120) if p != port}
                assert open_socket_bytes(others | {port: "link"})["link"] == expected["link"]
    assert open_socket_bytes({}) == {}


@needs_ss
def test_each_probe_sample_meters_the_links_and_the_series_outlives_the_stop(wedge):
    meter = LinkMeter(wedge.topology)
    probe = Probe(wedge.topology, on_sample=meter.add_sample).start()
    try:
        harness = wedge.harness(agents=4, rounds=5)
        assert harness.wait(60)
        # The router's connections to the workers stay open: their bytes are the kernel's.
        series = wait_for(
            lambda: (
                (s := meter.series())
                and len(s) >= 3
                and s[-1][1].get("router->decode-0", {}).get("downstream", 0) > 0
                and s
            ),
            timeout_s=15,
            what="3 points, the last with bytes on router->decode-0",
        )
        times = [t for t, _ in series]
        assert times == sorted(times)
        assert set(series[-1][1]) <= set(wedge.topology.links)
    finally:
        probe.stop()
    assert len(meter.series()) >= len(series)
    rates = meter.rates()
    assert rates.source == SOURCE_BOTH
    assert any(s.downstream > 0 for s in rates.spans["router->decode-0"])


def test_the_handle_meters_the_links_with_its_probe_from_the_tests_start(wedge):
    assert wedge.probe is not None and wedge.link_meter is not None
    assert wedge.probe.on_sample == wedge.link_meter.add_sample
    # The handle's probe took its first sample, and the meter its first point, as it started.
    first_sample, first_point = wedge.probe.samples()[0], wedge.link_meter.series()[0]
    assert first_point[0] == first_sample.taken_at
    assert wedge.started <= first_point[0] < wedge.started + 2.0
