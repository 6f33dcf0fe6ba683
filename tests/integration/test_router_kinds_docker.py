"""Router kinds on the docker runtime: each pinned router runs from its isolated venv, copied
into the offline image at its host path (``runtime/images.py``), never smg in its place; a
``command`` router's program given by bare name is looked up on the image's PATH, or refused.

Needs a Docker daemon (``make test`` starts a private one); skipped, saying how, without one.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_wedge.faults import Pause
from pytest_wedge.routers.adapters import adapter
from pytest_wedge.routers.envs import ready_env
from pytest_wedge.waiting import wait_for

pytestmark = [pytest.mark.timeout(420), pytest.mark.usefixtures("docker_up")]


def located(wedge: Any, origin: str) -> Any:
    diagnosis = wedge.diagnose(origin, overdue_after_s=0.5)
    return diagnosis if diagnosis.location != "none" else None


@pytest.mark.parametrize(
    ("kind", "protocol"), [("sglang-router", "sglang"), ("vllm-router", "vllm")]
)
def test_a_pinned_router_runs_in_docker_from_its_own_venv_and_a_pause_is_located(
    wedge_factory: Any, kind: str, protocol: str
) -> None:
    wedge = wedge_factory(router=kind, worker_protocol=protocol, runtime="docker")
    pinned = adapter(kind)
    env = ready_env(pinned.package, pinned.version)
    assert (
        env is not None
    )  # made on the host first, then copied: the version the process runtime runs
    runtime = wedge.topology.runtime
    assert runtime.name == "docker"
    argv = wedge.topology.components["router"].argv
    assert argv[0] == env.script(pinned.script)
    assert "smg" not in argv[0].rsplit("/", 1)[-1]
    (router,) = [line for line in wedge.topology.describe() if line.startswith("router: ")]
    assert router.startswith(f"router: {kind} {pinned.version} ({argv[0]}; built-in adapter, ")
    assert router.endswith(
        f"isolated venv {env.path} (copied into the image), on the docker runtime)"
    )

    healthy = wedge.harness(agents=3, rounds=1, max_tokens=4, client_timeout_s=30)
    assert healthy.wait(60)
    assert wedge.ledger.by_origin("harness").states().get("ok") == 3

    # A container pause is a wedge at the router on this kind too.
    with wedge.fault(Pause("router")):
        wedge.harness(agents=2, rounds=1, max_tokens=4, origin="stuck", client_timeout_s=None)
        diagnosis = wait_for(
            lambda: located(wedge, "stuck"),
            timeout_s=30,
            what="the paused router container to show as a wedge",
        )
        assert diagnosis.location == "router", diagnosis.render()


SMG_BY_NAME = (
    "{program} launch --host {{host}} --port {{port}} --pd-disaggregation "
    "--prefill {{prefill_url[0]}} {{bootstrap_port[0]}} --decode {{decode_url[0]}} "
    "--prometheus-host {{host}} --prometheus-port {{metrics_port}}"
)


def test_a_command_router_by_bare_name_runs_from_the_images_path_or_is_refused(
    wedge_factory: Any,
) -> None:
    with pytest.raises(pytest.fail.Exception) as raised:  # the plugin fails the test with its text
        wedge_factory(
            router={"kind": "command", "command": SMG_BY_NAME.format(program="my-router")},
            runtime="docker",
        )
    text = str(raised.value)
    assert "ConfigError: router's program 'my-router' is not in the docker image" in text
    assert "To fix this: give router's command its absolute path" in text

    # smg by bare name is on the image's PATH (the project venv's bin/), as on the host.
    wedge = wedge_factory(
        router={"kind": "command", "command": SMG_BY_NAME.format(program="smg")}, runtime="docker"
    )
    assert wedge.topology.components["router"].argv[0] == "smg"
    healthy = wedge.harness(agents=2, rounds=1, max_tokens=4, client_timeout_s=30)
    assert healthy.wait(60)
    assert wedge.ledger.by_origin("harness").states().get("ok") == 2
