"""Bad input never crashes pytest-wedge: each mistake gets its own error text.

Covered here, beside what tests/plugin/test_plugin_surface.py and
tests/unit/test_scenarios_schema.py already pin down: generated malformed scenario files, unknown
links and components in a test, bad marker and option values, a missing smg or Docker SDK, a
port that is already taken, a router that exits at start, and stub workers fed malformed or
absurd HTTP bodies. None may end in an INTERNALERROR, a traceback through pytest-wedge's
internals, a hang or a leak.
"""

from __future__ import annotations

import contextlib
import copy
import json
import re
import socket
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from leakcheck import TOXIPROXY, LeakProbe

from pytest_wedge.errors import ConfigError, PortInUseError
from pytest_wedge.runtime import wait_ready
from pytest_wedge.runtime.process import ProcessRuntime
from pytest_wedge.scenarios.catalog import CATALOG_DIR, load_scenario
from pytest_wedge.spec.marker_args import parse_keywords as parse_marker
from pytest_wedge.spec.topology import ComponentSpec
from pytest_wedge.topology.ports import FIRST_PORT, SLICE, SLICES, PortAllocator
from pytest_wedge.topology.session import WedgeSession

pytestmark = pytest.mark.timeout(120)
FUZZ = settings(
    max_examples=200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
# A frame of pytest-wedge in a traceback, e.g. "pytest_wedge/running.py:124".
INTERNAL_FRAME = re.compile(r"pytest_wedge/[\w/]+\.py:\d+")


def assert_no_crash(output: str) -> None:
    assert "INTERNALERROR" not in output, output
    assert not INTERNAL_FRAME.search(output), output


# -- malformed scenario files -------------------------------------------------------------------

CATALOG = {p.name: tomllib.loads(p.read_text()) for p in sorted(CATALOG_DIR.glob("*.toml"))}
BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def toml_value(value: Any) -> str:
    """TOML for a parsed value; tables and arrays of tables are written inline."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)  # nan and inf are TOML too
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + "}"


def toml_key(key: str) -> str:
    return key if BARE_KEY.match(key) else json.dumps(key, ensure_ascii=False)


SCALARS = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(),
    st.sampled_from([0, -1, 10**9, 0.0, -0.5, float("nan"), float("inf")]),
    st.text(max_size=12),
    st.sampled_from(["", "router", "decode-9", "Pause", "client->router"]),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path in a parsed file: ("faults", 0, "kind"), ..."""
    found = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, child in node.items():
            found += _paths(child, (*prefix, key))
    elif isinstance(node, list):
        for index, child in enumerate(node):
            found += _paths(child, (*prefix, index))
    return found


@st.composite
def mutated_catalog_files(draw: st.DrawFn) -> str:
    """A catalog file with one to three edits: a value replaced, a key deleted or one added."""
    data = copy.deepcopy(CATALOG[draw(st.sampled_from(sorted(CATALOG)))])
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(data)))
        parent = data
        for step in path[:-1]:
            parent = parent[step]
        edit = draw(st.sampled_from(["replace", "delete", "add"]))
        if edit == "replace":
            parent[path[-1]] = draw(VALUES)
        elif edit == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=8))] = draw(VALUES)
        else:
            parent.append(draw(VALUES))
    return "".join(f"{toml_key(k)} = {toml_value(v)}\n" for k, v in data.items())


def _load_or_explain(path: Path, text: str) -> None:
    """Either a scenario, or a ConfigError naming the file, what was wrong and the fix."""
    path.write_text(text)
    try:
        load_scenario(path)
    except ConfigError as exc:
        message = str(exc)
        assert message.startswith("Bad scenario file s.toml"), message
        assert "not valid TOML" in message or "  key: " in message, message
        assert f"To fix this: edit {path}" in message or "fix the TOML syntax" in message


@FUZZ
@given(text=mutated_catalog_files())
def test_mutated_catalog_files_are_loaded_or_explained(tmp_path: Path, text: str) -> None:
    _load_or_explain(tmp_path / "s.toml", text)


@FUZZ
@given(text=st.text(max_size=300))
def test_arbitrary_text_is_explained(tmp_path: Path, text: str) -> None:
    _load_or_explain(tmp_path / "s.toml", text)


MINIMAL = 'name = "x"\nsummary = "y"\n[expect]\nlocated_at = "router"\n'


@pytest.mark.parametrize(
    ("extra", "key", "expected"),
    [
        ("faults = [false]", "faults[0]", "a table"),
        ("watchdogs = [1]", "watchdogs[0]", "a table"),
        ("timeout_s = nan", "timeout_s", "a finite number of seconds >= 0"),
        ("timeout_s = 0", "timeout_s", "a number of seconds > 0"),
        (
            "[[faults]]\nkind = 'Pause'\ntarget = 'router'\nfor_s = -1",
            "faults[0].for_s",
            "a finite number of seconds >= 0",
        ),
        (
            "[[faults]]\nkind = 'Latency'\ntarget = 'router->decode-9'\nlatency_ms = 5",
            "faults[0].target",
            "a component or link of this topology",
        ),
        (
            "[topology]\nstub = {itl_ms = 'fast'}",
            "topology.stub.itl_ms",
            "expected: a number",
        ),
    ],
)
def test_each_found_mistake_names_its_key(
    tmp_path: Path, extra: str, key: str, expected: str
) -> None:
    # Top-level keys go first; a table goes between the top-level keys and [expect].
    head, _, expect = MINIMAL.partition("[expect]")
    text = f"{head}{extra}\n[expect]{expect}" if extra.startswith("[") else f"{extra}\n{MINIMAL}"
    path = tmp_path / "s.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_scenario(path)
    text = str(info.value)
    assert f"key: {key}" in text and expected in text, text


def test_an_old_spelling_of_target_is_refused_naming_its_key(tmp_path: Path) -> None:
    head, _, expect = MINIMAL.partition("[expect]")
    extra = "[[faults]]\nkind = 'Latency'\nlink = 'router->decode-0'\nlatency_ms = 5"
    path = tmp_path / "s.toml"
    path.write_text(f"{head}{extra}\n[expect]{expect}")
    with pytest.raises(ConfigError) as info:
        load_scenario(path)
    text = str(info.value)
    assert "key: faults[0].link" in text and "the arguments of Latency(target" in text, text


# -- the marker -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stub", "message"),
    [
        ({"itl_ms": "fast"}, "Bad stub option itl_ms: expected a number, got 'fast'"),
        ({"max_running": 2.5}, "Bad stub option max_running: expected an integer, got 2.5"),
        ({"seed": True}, "Bad stub option seed: expected an integer, got True"),
        ({"extra_args": "--x"}, "Bad stub option extra_args: expected a list of strings"),
    ],
)
def test_stub_options_are_type_checked(stub: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_marker((), {"stub": stub})


def test_stub_extra_args_as_a_list_still_give_a_hashable_spec() -> None:
    spec = parse_marker((), {"stub": {"extra_args": ["--context-length", "64"]}}).spec
    assert spec.stub.extra_args == ("--context-length", "64")
    assert {spec: 1}[spec] == 1  # topologies are cached by spec


def test_a_bad_stub_option_in_a_marker_fails_that_test_at_setup_naming_it(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile("""
        import pytest
        @pytest.mark.wedge(stub={"itl_ms": "fast"})
        def test_typo(wedge):
            pass
    """)
    result = pytester.runpytest_subprocess(f"--wedge-toxiproxy={TOXIPROXY}", timeout=60)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*::test_typo: bad @pytest.mark.wedge",
            "*Bad stub option itl_ms: expected a number*",
        ]
    )
    assert_no_crash(result.stdout.str() + result.stderr.str())


# -- a session that cannot start what a test asks for ------------------------------------------

BROKEN = """
import pytest
from pytest_wedge.faults import Latency, Pause


@pytest.mark.wedge(router_args=["--no-such-flag"])
def test_router_rejects_a_flag(wedge):
    pass


@pytest.mark.wedge(runtime="dokcer")
def test_unknown_runtime(wedge):
    pass


def test_unknown_link(wedge):
    wedge.apply(Latency("router->decode-9", latency_ms=5))


def test_unknown_component(wedge):
    wedge.apply(Pause("decoder-0"))


def test_the_session_still_works(wedge):
    record(wedge)
    assert wedge.harness(agents=2, rounds=1).wait(10)
"""


def test_what_cannot_start_or_does_not_exist_is_explained_without_leaks(
    leaks: LeakProbe,
) -> None:
    leaks.write_tests(BROKEN)
    code, output = leaks.run("-rfE")
    assert code == pytest.ExitCode.TESTS_FAILED
    assert "1 passed" in output, output
    for lines in (
        [
            "*ERROR at setup of test_router_rejects_a_flag*",
            "ComponentStartError: router exited during start-up with exit code 2",
            "*smg: error: unrecognized arguments: --no-such-flag",
            "To fix this: read the log tail above*",
        ],
        [
            "*ERROR at setup of test_unknown_runtime*",
            "test_inner.py::test_unknown_runtime: bad @pytest.mark.wedge",
            "Bad value for wedge_runtime: 'dokcer'",
            "  from: marker",
            "  expected one of: process, docker",
        ],
        [
            "*test_inner.py:*: in test_unknown_link",
            "*Latency(*",
            "ConfigError: Unknown link 'router->decode-9'",
            "  known links: client->router, router->prefill-0, router->decode-0, decode-0->prefill-0",
        ],
        [
            "*test_inner.py:*: in test_unknown_component",
            "ConfigError: Unknown component 'decoder-0'",
            "  known components: router, prefill-0, decode-0",
        ],
    ):
        pytest.LineMatcher(output.splitlines()).fnmatch_lines(lines)
    assert_no_crash(output)
    leaks.assert_clean()


def test_a_port_taken_after_it_was_chosen_fails_the_start_and_rolls_it_back(
    tmp_path: Path,
) -> None:
    squatter = socket.socket()

    class Racy(PortAllocator):
        """Another program binds the router's port between its choice and the start."""

        def take(self, count: int) -> list[int]:
            ports = super().take(count)
            if count > 1:  # the topology's ports, not Toxiproxy's
                squatter.bind(("127.0.0.1", ports[0]))
                squatter.listen()
            return ports

    session = WedgeSession(artifacts_dir=tmp_path)
    session.ports = Racy()
    with squatter, session:
        with pytest.raises(PortInUseError) as info:
            session.topology()
        assert session.toxiproxy is not None and session.toxiproxy.proxies() == {}
        assert session.topologies == {} and len(session.pids()) == 1  # Toxiproxy alone
    text = str(info.value)
    assert text.startswith("A port chosen for the topology is already taken"), text
    assert "router http: 127.0.0.1:" in text and "To fix this: stop the program listening" in text


def test_no_free_port_left_is_explained(tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
        session = WedgeSession(artifacts_dir=tmp_path)
        session.ports = PortAllocator(range(port, port + 1))  # a slice whose one port is taken
        with pytest.raises(PortInUseError) as info:
            session.start()
    text = str(info.value)
    assert text.startswith("Could not find 1 free ports below 32768"), text
    assert f"range: {port}-{port}" in text and "To fix this: free some ports" in text
    assert session.toxiproxy is None and session.pids() == []  # nothing was started


# -- bad option values and missing programs -----------------------------------------------------

USES_WEDGE = "def test_uses_topology(wedge):\n    pass\n"


@pytest.mark.parametrize(
    ("args", "env", "lines"),
    [
        (
            (),
            {"PYTEST_WEDGE_PROBE_INTERVAL": "-1"},
            [
                "*Bad value for wedge_probe_interval: '-1'",
                "*from: environment (PYTEST_WEDGE_PROBE_INTERVAL)",
                "*problem: must be >= 0",
            ],
        ),
        (
            (),
            {"PYTEST_WEDGE_KEEP": "maybe"},
            ["*Bad value for wedge_keep: 'maybe'", "*problem: expected true or false, got 'maybe'"],
        ),
        (
            ("--wedge-ready-timeout=0",),
            {},
            [
                "*Bad value for wedge_ready_timeout: '0'",
                "*from: command line",
                "*problem: must be > 0",
            ],
        ),
        (
            ("--wedge-artifacts=afile/sub",),
            {},
            [
                "*Cannot create the artifacts directory 'afile/sub'",
                "*from: command line",
                "To fix this: pass --wedge-artifacts=DIR*",
            ],
        ),
    ],
    ids=["env-probe-interval", "env-keep", "cli-ready-timeout", "cli-artifacts"],
)
def test_bad_option_values_are_usage_errors_naming_their_source(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    args: tuple[str, ...],
    env: dict[str, str],
    lines: list[str],
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    pytester.makepyfile(USES_WEDGE)
    pytester.path.joinpath("afile").write_text("a file, not a directory")
    result = pytester.runpytest_subprocess(f"--wedge-toxiproxy={TOXIPROXY}", *args, timeout=60)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(lines)
    assert_no_crash(result.stdout.str() + result.stderr.str())


def test_missing_smg_is_a_usage_error_naming_the_fix(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # In process: smg is looked up on PATH and next to sys.executable, both pointed elsewhere.
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin" / "python"))
    pytester.makepyfile(USES_WEDGE)
    result = pytester.runpytest_inprocess(f"--wedge-toxiproxy={TOXIPROXY}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*The smg router was not found",
            f"*looked for: smg on PATH and next to {tmp_path}*",
            "To fix this: run `make install`, or `pip install 'smg>=1.13,<1.14'`*",
        ]
    )


def test_missing_docker_sdk_names_the_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_wedge.runtime.docker import connect

    monkeypatch.setitem(sys.modules, "docker", None)  # import docker -> ImportError
    with pytest.raises(ConfigError) as info:
        connect()
    text = str(info.value)
    assert text.startswith("The docker runtime needs the Docker SDK for Python"), text
    assert "To fix this: pip install 'pytest-wedge[docker]'" in text


# -- stub workers fed malformed and absurd HTTP bodies ------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=10,
)
ABSURD = st.one_of(
    JSON,
    st.sampled_from(
        [
            -1,
            0,
            2**63,
            10**30,
            -(10**30),
            1.5,
            float("nan"),
            float("inf"),
            float("-inf"),
            "",
            "16",
            [],
            {},
            True,
        ]
    ),
)
FIELDS = [
    "stream",
    "max_tokens",
    "max_completion_tokens",
    "messages",
    "prompt",
    "text",
    "model",
    "sampling_params",
    "stream_options",
    "user",
    "rid",
    "bootstrap_room",
    "n",
]
BASE = {
    "/v1/chat/completions": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    "/v1/completions": {"model": "m", "prompt": "hi"},
    "/generate": {"text": "hi", "sampling_params": {"max_new_tokens": 4}},
}
NESTED = b"[" * 100_000 + b"]" * 100_000  # deeper than any JSON parser's recursion limit


def free_ports(count: int) -> list[int]:
    """Ports the kernel picks (bind to 0): in its ephemeral range, above every slice that the
    port allocator hands out, so a stub started here never takes a topology's port."""
    allocator_ports = range(FIRST_PORT, FIRST_PORT + SLICE * SLICES)
    with contextlib.ExitStack() as held:  # held together, so the kernel picks distinct ones
        socks = [held.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        ports: list[int] = [sock.getsockname()[1] for sock in socks]
    assert not set(ports) & set(allocator_ports), (ports, allocator_ports)
    return ports


@dataclass(frozen=True)
class Stub:
    role: str
    url: str
    bootstrap_port: int
    runtime: ProcessRuntime


@pytest.fixture(scope="module", params=["prefill", "decode"])
def stub(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stub]:
    """One real stub process (no router); prompts capped at 64 tokens, no inter-token delay."""
    role = request.param
    http, bootstrap = free_ports(2)
    argv = [
        sys.executable,
        "-m",
        "pytest_wedge.stubs",
        "--role",
        role,
        "--name",
        f"{role}-0",
        "--host",
        "127.0.0.1",
        "--port",
        str(http),
        "--itl-ms",
        "0",
        "--context-length",
        "64",
        "--bootstrap-timeout-s",
        "1",
    ]
    if role == "prefill":
        argv += ["--bootstrap-port", str(bootstrap)]
    component = ComponentSpec(
        name=f"{role}-0",
        role=role,
        argv=tuple(argv),  # type: ignore[arg-type]
        ready_url=f"http://127.0.0.1:{http}/health",
        ports=(http,),
    )
    runtime = ProcessRuntime(tmp_path_factory.mktemp(f"stub-{role}"), "fuzz")
    try:
        runtime.start(component)
        wait_ready(runtime, [component], timeout_s=30)
        yield Stub(role, f"http://127.0.0.1:{http}", bootstrap, runtime)
    finally:
        runtime.close()


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10, trust_env=False) as http:
        yield http


def _body(role: str, draw: st.DrawFn) -> tuple[str, bytes]:
    path = draw(st.sampled_from(sorted(BASE)))
    kind = draw(st.sampled_from(["fields", "json", "bytes", "nested"]))
    if kind == "nested":
        return path, NESTED
    if kind == "bytes":
        return path, draw(st.binary(max_size=200))
    if kind == "json":
        return path, json.dumps(draw(JSON)).encode()
    body = dict(BASE[path])
    # No PD bootstrap fields on a prefill: a room there waits for a decode that never comes.
    names = [f for f in FIELDS if not (role == "prefill" and f == "bootstrap_room")]
    for name in draw(st.lists(st.sampled_from(names), min_size=1, max_size=3)):
        body[name] = draw(ABSURD)
    return path, json.dumps(body).encode()


def _assert_still_serving(client: httpx.Client, stub: Stub) -> None:
    assert stub.runtime.state(f"{stub.role}-0") == "running"
    assert client.get(stub.url + "/health").status_code == 200
    answer = client.post(
        stub.url + "/v1/chat/completions", json={**BASE["/v1/chat/completions"], "max_tokens": 3}
    )
    assert answer.status_code == 200, answer.text
    if stub.role == "decode":  # a prefill only prefills: its answer carries no tokens
        assert answer.json()["usage"]["completion_tokens"] == 3


@FUZZ
@given(data=st.data())
def test_stubs_answer_malformed_generate_bodies_with_4xx_and_keep_serving(
    stub: Stub, client: httpx.Client, data: st.DataObject
) -> None:
    path, body = _body(stub.role, data.draw)
    answer = client.post(
        stub.url + path, content=body, headers={"content-type": "application/json"}
    )
    assert answer.status_code == 200 or 400 <= answer.status_code < 500, (body[:200], answer.text)
    _assert_still_serving(client, stub)


FAULT_BODIES = st.one_of(
    JSON,
    st.fixed_dictionaries(
        {
            "name": st.text(max_size=8) | ABSURD,
            "kind": st.sampled_from(
                ["stall_after_tokens", "error_status", "slow_tokens", "crash", "nope"]
            )
            | ABSURD,
        },
        optional={
            "tokens": ABSURD,
            "status": ABSURD,
            "itl_ms": ABSURD,
            "exit_code": ABSURD,
            "message": ABSURD,
            "origin": ABSURD,
        },
    ),
)
WATCHDOG_BODIES = JSON | st.fixed_dictionaries(
    {}, optional={"inflight_pin_s": ABSURD, "transfer_timeout_s": ABSURD}
)


@FUZZ
@given(fault=FAULT_BODIES, watchdogs=WATCHDOG_BODIES)
def test_stubs_answer_malformed_control_calls_with_4xx_and_keep_serving(
    stub: Stub, client: httpx.Client, fault: Any, watchdogs: Any
) -> None:
    try:
        for path, body in (("/control/faults", fault), ("/control/watchdogs", watchdogs)):
            answer = client.post(stub.url + path, content=json.dumps(body).encode())
            assert answer.status_code in (200, 400), (path, body, answer.text)
        answer = client.post(stub.url + "/control/faults", content=NESTED)
        assert answer.status_code == 400, answer.text
    finally:
        client.post(stub.url + "/control/reset")  # a valid fault (a crash) must not stay armed
    _assert_still_serving(client, stub)


@pytest.mark.parametrize("stub", ["prefill"], indirect=True)  # the bootstrap server's role
@FUZZ
@given(room=st.text(min_size=1, max_size=20).filter(lambda s: not _is_int(s)))
def test_the_bootstrap_server_rejects_a_room_that_is_not_an_integer(
    stub: Stub, client: httpx.Client, room: str
) -> None:
    url = f"http://127.0.0.1:{stub.bootstrap_port}/kv/{quote(room, safe='')}"
    answer = client.post(url)
    assert answer.status_code in (400, 404), answer.text
    _assert_still_serving(client, stub)


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True
