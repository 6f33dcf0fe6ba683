"""One session per pytest process: a Toxiproxy server and the topologies on it, cached by spec,
so tests of one shape share a running topology and pay only for a reset."""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from pytest_wedge.runtime import Runtime, make_runtime, wait_ready
from pytest_wedge.runtime.binaries import find_toxiproxy
from pytest_wedge.spec.shape import shape_id
from pytest_wedge.spec.topology import TopologySpec
from pytest_wedge.topology.ports import PortAllocator
from pytest_wedge.topology.running import Topology, find_executables
from pytest_wedge.topology.toxiproxy import ToxiproxyClient, server_component
from pytest_wedge.topology.worker_start import fixed_listen
from pytest_wedge.waiting import in_background

RuntimeFactory = Callable[[str, str, str], Runtime]
MAX_TOPOLOGIES = 3  # each costs ~150 MB: a suite with many router flags keeps the recent ones
# One JSON line per topology this session brought up (docs/scaling.md): under xdist, how many
# bring-ups a run paid per shape and worker.
BRING_UPS_FILE = "bring-ups-{runtime}.jsonl"


class WedgeSession:
    """A context manager owning the Toxiproxy server and every topology of this process."""

    def __init__(
        self,
        *,
        runtime: str = "process",
        artifacts_dir: str | Path | None = None,
        toxiproxy_binary: str | None = None,
        runtime_factory: RuntimeFactory | None = None,
        ready_timeout_s: float = 30.0,
    ) -> None:
        self.runtime_name = runtime
        self.session_id = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        base = Path(artifacts_dir) if artifacts_dir else Path(".wedge-artifacts")
        self.artifacts_dir = (base / worker).resolve()
        project_root = Path(__file__).resolve().parents[2]
        self.toxiproxy_binary = find_toxiproxy(toxiproxy_binary, project_root)
        self.exe = find_executables(self.toxiproxy_binary)
        self._runtime_factory = runtime_factory or make_runtime
        self.ready_timeout_s = ready_timeout_s
        self.ports = PortAllocator()
        self._started = 0
        self.bring_ups: list[dict[str, object]] = []
        self.topologies: dict[TopologySpec, Topology] = {}
        self._runtimes: list[Runtime] = []
        self.toxiproxy: ToxiproxyClient | None = None
        self._toxiproxy_runtime: Runtime | None = None

    def _runtime(self, label: str) -> Runtime:
        runtime = self._runtime_factory(
            self.runtime_name, str(self.artifacts_dir / label), self.session_id
        )
        self._runtimes.append(runtime)
        return runtime

    def start(self) -> WedgeSession:
        self.sweep()
        self._bring_ups_path.unlink(missing_ok=True)  # a record of this session only
        try:
            runtime = self._toxiproxy_runtime = self._runtime("toxiproxy")
            (port,) = self.ports.take(1)
            component = server_component(self.toxiproxy_binary, port)
            runtime.start(component)
            # Toxiproxy gets ready (about 30 ms) while the first topology's stub fork server
            # imports, which is what a bring-up waits on: its client waits at its first call.
            ready = in_background(wait_ready, runtime, [component], timeout_s=self.ready_timeout_s)

            def restart() -> None:
                runtime.restart(component.name)
                wait_ready(runtime, [component], timeout_s=self.ready_timeout_s)

            self.toxiproxy = ToxiproxyClient(port, ready=ready, restart=restart)
        except BaseException:
            self.close()
            raise
        return self

    def __enter__(self) -> WedgeSession:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def sweep(self) -> None:
        """Remove what a killed earlier session left behind (processes, containers)."""
        from pytest_wedge.runtime.owner_tags import sweep_leftovers

        sweep_leftovers()
        if self.runtime_name == "docker":
            from pytest_wedge.runtime.docker import sweep_containers

            sweep_containers()

    def topology(self, spec: TopologySpec | None = None) -> Topology:
        """The running topology for ``spec``, started on first use and shared afterwards."""
        spec = spec or TopologySpec()
        if self.toxiproxy is None:
            self.start()
        assert self.toxiproxy is not None
        existing = self.topologies.pop(spec, None)
        if existing is not None:
            self.topologies[spec] = existing  # most recently used last
            return existing
        wanted = fixed_listen(spec)
        for other in [cached for cached in self.topologies if fixed_listen(cached) & wanted]:
            # Its proxies listen where this one's must (a running router or worker sends there).
            self.topologies.pop(other).close()
        if spec.real_engines:  # about 7 GB of RAM per 1P+1D of vLLM: one at a time
            for other in [cached for cached in self.topologies if cached.real_engines]:
                self.topologies.pop(other).close()
        while len(self.topologies) >= MAX_TOPOLOGIES:
            oldest = next(iter(self.topologies))
            self.topologies.pop(oldest).close()
        index = self._started
        self._started += 1
        shared = (self.toxiproxy, self.exe, self.ports, self.ready_timeout_s)
        topo = Topology(spec, self._runtime(f"topology-{index}"), *shared, f"t{index}_")
        started = time.monotonic()
        topo.start()
        self._record_bring_up(spec, time.monotonic() - started)
        self.topologies[spec] = topo
        return topo

    @property
    def _bring_ups_path(self) -> Path:
        return self.artifacts_dir / BRING_UPS_FILE.format(runtime=self.runtime_name)

    def _record_bring_up(self, spec: TopologySpec, seconds: float) -> None:
        record: dict[str, object] = {
            "worker": self.artifacts_dir.name,
            "runtime": self.runtime_name,
            "shape": shape_id(spec, self.runtime_name),
            "seconds": round(seconds, 3),
        }
        self.bring_ups.append(record)
        with contextlib.suppress(OSError):  # a record that cannot be written costs no test
            self.artifacts_dir.mkdir(parents=True, exist_ok=True)
            with open(self._bring_ups_path, "a") as fh:
                fh.write(json.dumps(record) + "\n")

    def pids(self) -> list[int]:
        """PIDs of everything this session runs (host PIDs, for either runtime)."""
        pids = [self._toxiproxy_runtime.pid("toxiproxy")] if self._toxiproxy_runtime else []
        for topo in self.topologies.values():
            pids += topo.pids().values()
        return [pid for pid in pids if pid]

    def close(self) -> None:
        for topo in self.topologies.values():
            with contextlib.suppress(Exception):
                topo.close()
        self.topologies.clear()
        for runtime in reversed(self._runtimes):
            with contextlib.suppress(Exception):
                runtime.close()
        self._runtimes.clear()
        if self.toxiproxy is not None:
            self.toxiproxy.close()
            self.toxiproxy = None
        self.ports.close()
