"""Router kinds: the pinned routers from their isolated venvs, what each does differently, and
a user's own router by command template or by URL, located and cleared like the built-in."""

from __future__ import annotations

import pytest

from pytest_wedge.routers.adapters import SGLANG_ROUTER
from pytest_wedge.routers.envs import ready_env

pytestmark = pytest.mark.timeout(120)


def _ok_harness(wedge, n: int = 5) -> None:
    harness = wedge.harness(agents=n, rounds=1, max_tokens=4, client_timeout_s=20)
    assert harness.wait(30)
    states = wedge.ledger.by_origin("harness").states()
    assert states.get("ok") == n, states


@pytest.mark.wedge(router="sglang-router")
def test_sglang_router_runs_from_its_isolated_venv_and_origin_survives_by_header(wedge):
    env = ready_env(SGLANG_ROUTER.package, SGLANG_ROUTER.version)
    assert env is not None
    assert wedge.topology.components["router"].argv[0] == env.script("sglang-router")
    _ok_harness(wedge)
    # sglang-router drops `user` from chat bodies (routers.md A2): the origin the workers
    # record can only have come from the x-request-id-origin header.
    decode = wedge.worker_ledgers()["decode-0"]["entries"]
    harness = [e for e in decode if e["origin"] == "harness"]
    assert len(harness) == 5, [e["origin"] for e in decode]
