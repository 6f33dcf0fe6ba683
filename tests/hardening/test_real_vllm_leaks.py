"""Nothing of a real vLLM engine outlives its session. The engine forks (API server, EngineCore),
so each runs in its own process group; every process an inner session starts carries the leak
mark, EngineCore included. One inner session on real engines (a bring-up costs minutes) goes
through a pass, a failure and a pytest-timeout, then is interrupted (SIGINT) in a hang; after
it, no process, proxy or temp entry of it is left.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest
from leakcheck import LeakProbe

from pytest_wedge.waiting import wait_for

INNER = """
import pytest
from pytest_wedge.faults import Pause

ENGINE = {"kind": "vllm"}
pytestmark = pytest.mark.wedge(
    router="vllm-router", prefill_worker=ENGINE, decode_worker=ENGINE
)


def test_pass(wedge):
    record(wedge)
    assert wedge.harness(agents=2, rounds=1, max_tokens=4).wait(60)


def test_fail(wedge):
    wedge.apply(Pause("decode-0"))
    assert False, "deliberate"


@pytest.mark.timeout(3, func_only=True)
def test_hang(wedge):
    wedge.apply(Pause("router"))
    wedge.harness(agents=2, rounds=1, client_timeout_s=None).wait()


@pytest.mark.timeout(600)
def test_hang_until_signalled(wedge):
    wedge.apply(Pause("prefill-0"))
    harness = wedge.harness(agents=2, rounds=1, client_timeout_s=None)
    open(RECORD_DONE, "w").close()
    harness.wait()  # until the outer test signals this pytest
"""

pytestmark = [
    pytest.mark.xdist_group("real-vllm"),
    # A bring-up of its own, so not in `make test`: `make real-engine` runs it.
    pytest.mark.skipif(os.environ.get("WEDGE_REAL_VLLM") != "all", reason="make real-engine"),
]


@pytest.mark.timeout(1500)
def test_a_real_engine_session_leaves_nothing_after_pass_fail_timeout_and_ctrl_c(
    leaks: LeakProbe, wedge_session: Any
) -> None:
    # At most one 1P+1D of real engines on the machine: close this process's own first.
    for spec in [s for s in wedge_session.topologies if s.real_engines]:
        wedge_session.topologies.pop(spec).close()
    done = leaks.root / "hanging"
    leaks.write_tests(f"RECORD_DONE = {str(done)!r}\n" + INNER)
    proc = leaks.popen("test_inner.py", "-p", "no:randomly")
    leaks.wait_recorded(proc, timeout_s=900)  # the bring-up, then test_pass
    wait_for(done.exists, timeout_s=300, what="the inner session's last test to hang")
    proc.send_signal(signal.SIGINT)  # the pytest process only, not its process group
    assert proc.wait(timeout=120) == pytest.ExitCode.INTERRUPTED, leaks.output()
    output = leaks.output()
    assert "KeyboardInterrupt" in output and "Timeout" in output, output
    leaks.assert_clean(timeout_s=30)
