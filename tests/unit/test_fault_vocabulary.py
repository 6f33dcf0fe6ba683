"""One fault vocabulary: one target field, a registry, unique instance names, the engine kinds
defined once by the stub's parser, and scheduled faults whose errors surface. No processes."""

from __future__ import annotations

import dataclasses
import inspect
import threading
import typing
from typing import Any

import pytest

import pytest_wedge.faults as faults
from pytest_wedge.errors import ConfigError, FieldTypeError
from pytest_wedge.faults import (
    FAULT_REGISTRY,
    DecodeOnlyRestart,
    Down,
    EngineFault,
    ErrorStatus,
    Fault,
    FaultNotApplied,
    FaultSet,
    Latency,
    Pause,
    PauseEngineProcess,
    ScheduledFaultError,
    StallAfterTokens,
    register,
)
from pytest_wedge.reference.introspect import type_text
from pytest_wedge.scenarios.catalog import WATCHDOGS
from pytest_wedge.spec.topology import TopologySpec
from pytest_wedge.stubs.engine_faults import KINDS, parse_fault

ENGINE_FAULTS = sorted(
    (c for c in FAULT_REGISTRY.values() if issubclass(c, EngineFault)), key=lambda c: c.__name__
)
BOOKKEEPING = {"target", "origin", "instance_id"}  # fields that are not stub parameters


# -- the engine vocabulary: the stub's parser is the source of truth --------------------------


def _worker_for(cls: type[EngineFault]) -> str:
    return "decode-0" if "decode" in cls.roles else "prefill-0"


@pytest.mark.parametrize("cls", ENGINE_FAULTS, ids=lambda c: c.__name__)
def test_engine_fault_class_matches_the_stub_vocabulary(cls: type[EngineFault]) -> None:
    assert cls.kind in KINDS, f"{cls.__name__}.kind {cls.kind!r} is not a stub kind"
    fields = {f.name: f for f in dataclasses.fields(cls)}
    assert set(fields) - BOOKKEEPING == set(KINDS[cls.kind]), "fields differ from the stub's"
    for param, stub_default in KINDS[cls.kind].items():
        if stub_default is not None:  # a stub default is the class default, never another
            assert fields[param].default == stub_default, f"{cls.__name__}.{param}"
    fault = cls(_worker_for(cls), origin="harness")  # type: ignore[call-arg]
    parsed = parse_fault(fault.payload())
    assert (parsed.name, parsed.kind, parsed.origin) == (fault.fault_name, cls.kind, "harness")
    for param in KINDS[cls.kind]:
        assert getattr(parsed, param) == getattr(fault, param), param


def test_every_stub_kind_has_exactly_one_class() -> None:
    assert sorted(c.kind for c in ENGINE_FAULTS) == sorted(KINDS)


# -- one target field ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cls", "keyword", "extra"),
    [
        (Latency, "link", {"latency_ms": 5}),
        (Down, "link", {}),
        (Pause, "component", {}),
        (ErrorStatus, "component", {"status": 503}),
        (DecodeOnlyRestart, "decode", {}),
    ],
)
def test_a_fault_takes_its_target_under_one_name(
    cls: type[Fault], keyword: str, extra: dict[str, Any]
) -> None:
    with pytest.raises(TypeError, match=keyword):
        cls(**{keyword: "router"}, **extra)


def test_every_registered_fault_has_one_target_field_first() -> None:
    for name, cls in FAULT_REGISTRY.items():
        first = dataclasses.fields(cls)[0]
        assert first.name == "target" and not first.kw_only, name
        assert "target" in inspect.signature(cls).parameters, name


# -- field types: checked by the constructors, from the annotations -------------------------


def _valid_arguments(factory: Any) -> dict[str, Any]:
    """Values for the required parameters, of their annotated types."""
    samples = {"int": 1, "float": 1.0, "str": "decode-0", "Sequence[str]": ["true"]}
    hints = typing.get_type_hints(factory)
    return {
        name: samples[type_text(hints[name])]
        for name, param in inspect.signature(factory).parameters.items()
        if param.default is param.empty
    }


FIELDS = [
    (cls, name)
    for cls in sorted(FAULT_REGISTRY.values(), key=lambda c: c.__name__)
    for name in inspect.signature(cls).parameters
]


@pytest.mark.parametrize(("cls", "field"), FIELDS, ids=lambda x: getattr(x, "__name__", x))
def test_every_fault_field_refuses_a_value_of_the_wrong_type(cls: type[Fault], field: str) -> None:
    cls(**_valid_arguments(cls))  # the right types pass
    with pytest.raises(TypeError, match=rf"Bad {cls.__name__} field {field}: expected .*, got"):
        cls(**{**_valid_arguments(cls), field: object()})


def test_a_wrong_type_names_the_field_what_was_expected_and_what_was_found() -> None:
    with pytest.raises(FieldTypeError) as info:
        StallAfterTokens("decode-0", tokens="five")  # type: ignore[arg-type]
    assert (info.value.field, info.value.expected, info.value.found) == (
        "tokens",
        "an integer",
        "five",
    )
    assert str(info.value) == "Bad StallAfterTokens field tokens: expected an integer, got 'five'"
    with pytest.raises(TypeError, match="field latency_ms: expected an integer, got True"):
        Latency("router->decode-0", latency_ms=True)  # a bool is not a number here


@pytest.mark.parametrize("name", sorted(WATCHDOGS))
def test_every_watchdog_argument_refuses_a_value_of_the_wrong_type(name: str) -> None:
    factory = WATCHDOGS[name]
    valid = _valid_arguments(factory)
    factory(**valid)
    for param in inspect.signature(factory).parameters:
        with pytest.raises(TypeError, match=rf"Bad {name}.* {param}: expected .*, got"):
            factory(**{**valid, param: object()})


# -- the registry ------------------------------------------------------------------------------


def test_the_registry_holds_every_exported_concrete_fault_and_no_base() -> None:
    exported = {
        name
        for name in faults.__all__
        if isinstance(cls := getattr(faults, name), type)
        and issubclass(cls, Fault)
        and not inspect.isabstract(cls)
    }
    bases = {"Fault", "Toxic", "EngineFault", "ComponentFault"}
    assert set(FAULT_REGISTRY) == exported - bases
    with pytest.raises(TypeError):
        FAULT_REGISTRY["Pause"] = Pause  # type: ignore[index]  # read-only


def test_register_refuses_a_base_class_and_a_second_class_of_one_name() -> None:
    with pytest.raises(TypeError, match="concrete"):
        register(faults.Toxic)

    @dataclasses.dataclass(frozen=True)
    class Pause(Fault):  # same name as the built-in one
        def apply(self, topology: Any) -> None: ...

    with pytest.raises(ConfigError, match="Two faults are registered as 'Pause'"):
        register(Pause)
    assert FAULT_REGISTRY["Pause"] is faults.Pause


# -- unique instance names ---------------------------------------------------------------------


def test_equal_faults_get_their_own_toxic_and_stub_names() -> None:
    first, second = (Latency("client->router", latency_ms=5) for _ in range(2))
    assert first == second and hash(first) == hash(second)
    assert first.toxic_name != second.toxic_name
    assert first.toxic_name.startswith("wedge_latency_downstream_")
    assert dataclasses.replace(first).toxic_name not in (first.toxic_name, second.toxic_name)
    alpha, beta = (ErrorStatus("decode-0", origin=o) for o in ("alpha", "beta"))
    assert alpha.fault_name != beta.fault_name
    assert alpha.fault_name.startswith("wedge-error_status-")


class _Toxiproxy:
    def __init__(self) -> None:
        self.held: dict[str, set[str]] = {}

    def add_toxic(self, proxy: str, toxic: dict[str, Any]) -> None:
        names = self.held.setdefault(proxy, set())
        assert toxic["name"] not in names, "Toxiproxy answers 409"
        names.add(toxic["name"])

    def remove_toxic(self, proxy: str, name: str) -> None:
        self.held.get(proxy, set()).discard(name)

    def toxics(self, proxy: str) -> list[dict[str, Any]]:
        return [{"name": name} for name in sorted(self.held.get(proxy, set()))]


class _Link:
    proxy = "t0_client__to__router"


class _Topology:
    def __init__(self) -> None:
        self.spec = TopologySpec(prefill=2, decode=2)
        self.links = {name: _Link() for name in self.spec.link_names()}
        self.toxiproxy = _Toxiproxy()
        self.restarted: list[tuple[str, ...]] = []

    def restart(self, *names: str) -> None:
        self.restarted.append(names)

    def pd_pair(self, decode: str) -> list[str]:
        return [*self.spec.prefill_names, decode]


def test_two_latency_toxics_on_one_link_both_apply_and_revert_alone() -> None:
    topology = _Topology()
    fault_set = FaultSet(topology)  # type: ignore[arg-type]
    first = fault_set.apply(Latency("client->router", latency_ms=5))
    second = fault_set.apply(Latency("client->router", latency_ms=5))
    applied = topology.toxiproxy.held[_Link.proxy]
    assert applied == {first.toxic_name, second.toxic_name}  # type: ignore[attr-defined]
    fault_set.revert(first)
    assert applied == {second.toxic_name}  # type: ignore[attr-defined]
    assert fault_set.active_faults() == [second]
    assert fault_set.windows[1].verified == "Toxiproxy lists latency downstream on client->router"


def test_a_toxic_toxiproxy_does_not_list_fails_at_once_naming_what_was_seen() -> None:
    class _Forgetful(_Toxiproxy):
        def add_toxic(self, proxy: str, toxic: dict[str, Any]) -> None:
            """Answers 200 and keeps nothing, as a proxy recreated under it would."""

    topology = _Topology()
    topology.toxiproxy = _Forgetful()
    fault_set = FaultSet(topology)  # type: ignore[arg-type]
    with pytest.raises(FaultNotApplied) as failure:
        fault_set.apply(Latency("client->router", latency_ms=5))
    text = str(failure.value)
    assert "Latency on client->router did not take effect" in text
    assert "expected: Toxiproxy lists the toxic wedge_latency_downstream_" in text
    assert f"seen: {_Link.proxy} lists no toxics" in text


# -- DecodeOnlyRestart: the wedged transfers come from the topology ----------------------------


def test_decode_only_restart_derives_its_prefills_from_the_pd_pair() -> None:
    topology = _Topology()
    fault = DecodeOnlyRestart("decode-1")
    assert fault.wedged_links(topology) == ["decode-1->prefill-0", "decode-1->prefill-1"]  # type: ignore[arg-type]
    pinned = DecodeOnlyRestart("decode-1", prefills=["prefill-1"])  # type: ignore[arg-type]
    assert pinned.prefills == ("prefill-1",) and hash(pinned)
    assert pinned.wedged_links(topology) == ["decode-1->prefill-1"]  # type: ignore[arg-type]
    fault.apply(topology)  # type: ignore[arg-type]
    assert topology.restarted == [("decode-1",)]  # the decode only
    with pytest.raises(ConfigError, match="Unknown link 'decode-1->prefill-7'"):
        DecodeOnlyRestart("decode-1", prefills=("prefill-7",)).apply(topology)  # type: ignore[arg-type]


# -- scheduled faults: errors in the timer thread surface ------------------------------------


@dataclasses.dataclass(frozen=True)
class _Broken(Fault):
    """Applies or reverts with an error, as a fault with a bad target would."""

    fail_on: str = "apply"

    def apply(self, topology: Any) -> None:
        if self.fail_on == "apply":
            raise ConfigError(f"Unknown component {self.target!r}")

    def revert(self, topology: Any) -> None:
        if self.fail_on == "revert":
            raise RuntimeError("revert broke")


def test_a_failed_scheduled_apply_is_returned_at_teardown_and_raised_once() -> None:
    fault_set = FaultSet(_Topology())  # type: ignore[arg-type]
    fault_set.schedule(_Broken("decoder-9"), at_s=0.01)
    assert fault_set.wait_scheduled(timeout_s=10)
    assert [e.action for e in fault_set.scheduled_errors] == ["apply"]
    errors = fault_set.revert_all()
    assert len(errors) == 1 and "scheduled apply of _Broken on decoder-9" in errors[0]
    assert "Unknown component 'decoder-9'" in errors[0]
    with pytest.raises(ScheduledFaultError, match="1 scheduled fault action") as info:
        fault_set.apply(Pause("router"))
    assert isinstance(info.value.__cause__, ConfigError)
    assert fault_set.active_faults() == []  # raised once; the failed apply was undone
    assert fault_set.revert_all() == []


def test_a_failed_scheduled_revert_is_raised_by_active_faults() -> None:
    fault_set = FaultSet(_Topology())  # type: ignore[arg-type]
    fault_set.schedule(_Broken("router", fail_on="revert"), at_s=0.0, for_s=0.0)
    assert fault_set.wait_scheduled(timeout_s=10)
    with pytest.raises(ScheduledFaultError, match="scheduled revert of _Broken on router"):
        fault_set.active_faults()


def test_scheduled_errors_are_not_raised_in_another_thread() -> None:
    """A watchdog thread applying a fault must not swallow the test's error."""
    fault_set = FaultSet(_Topology())  # type: ignore[arg-type]
    fault_set.schedule(_Broken("decoder-9"), at_s=0.01)
    assert fault_set.wait_scheduled(timeout_s=10)
    elsewhere = threading.Thread(target=fault_set.apply, args=(_Broken("router", "never"),))
    elsewhere.start()
    elsewhere.join(10)
    with pytest.raises(ScheduledFaultError):
        fault_set.active_faults()


def test_a_fault_scheduled_at_0_s_is_applied_before_schedule_returns() -> None:
    # A timer thread can start late on a loaded machine; load started right after the call
    # must already meet the fault.
    topology = _Topology()
    fault_set = FaultSet(topology)  # type: ignore[arg-type]
    fault_set.schedule(Latency("client->router", latency_ms=5), at_s=0, for_s=3600)
    assert [type(f).__name__ for f in fault_set.active_faults()] == ["Latency"]
    assert topology.toxiproxy.held
    with pytest.raises(ConfigError, match="decoder-9"):
        fault_set.schedule(_Broken("decoder-9"), at_s=0)
    assert fault_set.revert_all() == []


def test_revert_all_cancels_what_is_still_due() -> None:
    topology = _Topology()
    fault_set = FaultSet(topology)  # type: ignore[arg-type]
    fault_set.schedule(Latency("client->router", latency_ms=5), at_s=3600)
    assert fault_set.revert_all() == []
    assert fault_set.wait_scheduled(timeout_s=10)
    assert topology.toxiproxy.held == {} and fault_set.active_faults() == []


# -- PauseEngineProcess on a stub: its engine loop, through the control API ---------------------


class _Stub:
    def __init__(self) -> None:
        self.active: dict[str, dict[str, Any]] = {}

    def add_fault(self, fault: dict[str, Any]) -> None:
        self.active[fault["name"]] = parse_fault(fault).to_json()

    def remove_fault(self, name: str) -> None:
        self.active.pop(name, None)

    def faults(self) -> list[dict[str, Any]]:
        return list(self.active.values())


class _Running:
    name = "process"

    def state(self, name: str) -> str:
        return "running"


class _StubTopology(_Topology):
    def __init__(self) -> None:
        super().__init__()
        self.runtime = _Running()
        self.decode = _Stub()

    def stub(self, name: str) -> _Stub:
        assert name == "decode-0"
        return self.decode


def test_pause_engine_process_on_a_stub_freezes_its_engine_loop_and_reverts_it() -> None:
    topology = _StubTopology()
    fault_set = FaultSet(topology)  # type: ignore[arg-type]
    paused = fault_set.apply(PauseEngineProcess("decode-0", process="engine-core"))
    assert [f["kind"] for f in topology.decode.faults()] == ["freeze_engine_loop"]
    assert fault_set.windows[0].verified == "decode-0 reports freeze_engine_loop active"
    fault_set.revert(paused)
    assert topology.decode.faults() == []
    with pytest.raises(ConfigError, match="a stub's API server and engine are one process") as e:
        fault_set.apply(PauseEngineProcess("decode-0", process="api-server"))
    assert "use Pause for the whole worker" in str(e.value)
    with pytest.raises(ConfigError, match="acts on one process of a vllm worker"):
        fault_set.apply(PauseEngineProcess("decode-0", process="scheduler"))
    assert topology.decode.faults() == []
