"""Per-router expectations in scenario files: read, checked, and applied only on that router."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_wedge.errors import ConfigError
from pytest_wedge.routers.router_spec import RouterSpec
from pytest_wedge.scenarios import catalog, load_scenario
from pytest_wedge.scenarios.per_router import for_router

BASE = """
name = "x"
summary = "x"
[topology]
router_args = ["--request-timeout-secs", "2", "--stream-body-stall-timeout-secs", "1"]
[[watchdogs]]
kind = "RequestTimeout"
seconds = 2
[expect]
located_at = "decode-0"
cleared_within_s = 3
"""


def _load(tmp_path: Path, extra: str):
    path = tmp_path / "x.toml"
    path.write_text(BASE + extra)
    return load_scenario(path)


def test_overrides_apply_only_on_their_router(tmp_path: Path) -> None:
    scenario = _load(
        tmp_path,
        """
[routers.sglang-router]
because = "no stall flag"
shown_by = "tests/x.py::test_y"
router_args = ["--request-timeout-secs", "2"]
watchdogs = [{ kind = "RequestTimeout", seconds = 2, expect_fire = false }]
expect = { cleared_within_s = 5 }
""",
    )
    on_sglang = for_router(scenario, "sglang-router")
    assert on_sglang.spec.router == RouterSpec(kind="sglang-router")
    assert on_sglang.spec.router_args == ("--request-timeout-secs", "2")
    assert [w.expect_fire for w in on_sglang.watchdogs] == [False]
    assert on_sglang.expect.cleared_within_s == 5 and on_sglang.expect.located_at == "decode-0"
    on_smg = for_router(scenario, "smg")
    assert on_smg.spec == scenario.spec and on_smg.expect == scenario.expect
    on_vllm = for_router(scenario, "vllm-router")  # no table: only the router changes
    assert on_vllm.spec.router.kind == "vllm-router" and on_vllm.expect == scenario.expect
    assert on_vllm.spec.worker_protocol == "vllm"  # vllm-router speaks only vLLM's protocol


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ('[routers.sglang-router]\nbecause = "x"\n', "routers.sglang-router.shown_by"),
        ('[routers.nginx]\nbecause = "x"\nshown_by = "t"\n', "routers.nginx"),
        (
            '[routers.sglang-router]\nbecause = "x"\nshown_by = "t"\nexpect = { red_herring = "s" }\n',
            "routers.sglang-router.expect.red_herring",
        ),
    ],
)
def test_a_bad_override_names_its_key(tmp_path: Path, table: str, key: str) -> None:
    with pytest.raises(ConfigError) as raised:
        _load(tmp_path, table)
    assert raised.value.facts["key"] == key


def test_every_override_in_the_catalog_cites_a_test_that_exists() -> None:
    root = Path(__file__).resolve().parents[2]
    cited = 0
    for scenario in catalog():
        for override in scenario.extra["routers"].values():
            path, _, names = override.shown_by.partition("::")
            source = (root / path).read_text()
            for name in names.replace("::", " ").replace(" and ", " ").split():
                assert f"def {name}(" in source, (scenario.name, name)
                cited += 1
    assert cited >= 3
