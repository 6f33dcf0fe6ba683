"""The topology keywords of the ``wedge`` marker, ``wedge_factory`` and scenario files, as the
parameters of one keyword-only function, so signature, checks and docs cannot drift apart.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_wedge.errors import ConfigError, close_match
from pytest_wedge.routers.router_spec import RouterSpec
from pytest_wedge.spec.component import check_fields, check_values, spec_from
from pytest_wedge.spec.topology import StubOptions, TopologySpec
from pytest_wedge.spec.workers import WorkerSpec, worker_spec


@dataclass(frozen=True)
class MarkerArgs:
    spec: TopologySpec
    runtime: str | None


def wedge(
    *,
    prefill: int = 1,
    decode: int = 1,
    router_args: Sequence[str] = (),
    stub: StubOptions | Mapping[str, Any] | None = None,
    runtime: str | None = None,
    router: str | RouterSpec | Mapping[str, Any] | None = None,
    worker_protocol: str = "auto",
    prefill_worker: WorkerSpec | Mapping[str, Any] | None = None,
    decode_worker: WorkerSpec | Mapping[str, Any] | None = None,
) -> MarkerArgs:
    """``@pytest.mark.wedge(prefill=1, decode=1, router_args=[...], stub={...}, runtime=...)``

    - ``prefill``/``decode``: how many workers of each role.
    - ``router_args``: extra ``smg launch`` flags, e.g. ``["--request-timeout-secs", "2"]``.
    - ``stub``: :class:`StubOptions` or a dict of its fields (``itl_ms``, ``max_running``, ...).
    - ``runtime``: ``"process"`` or ``"docker"`` for this test only.
    - ``router``: ``"smg"`` (default; ``--wedge-router`` changes it), ``"sglang-router"``,
      ``"vllm-router"``, or a dict ``{"kind": "command", "command": [...]}`` /
      ``{"kind": "url", "url": ..., ...}`` (the fields of :class:`RouterSpec`).
    - ``worker_protocol``: ``"auto"`` (default: the router's own, ``"vllm"`` for vllm-router,
      else ``"sglang"``), ``"sglang"`` or ``"vllm"``: the stubs' personality.
    - ``prefill_worker``/``decode_worker``: how that role's workers start: ``{"kind": "stub"}``
      (default), ``{"kind": "command", "command": [...]}`` or ``{"kind": "url", "urls": [...]}``
      (the fields of :class:`WorkerSpec`).
    """
    if isinstance(router_args, str) or not all(isinstance(a, str) for a in router_args):
        raise ConfigError(
            "router_args must be a list of strings",
            facts={"got": repr(router_args)},
            fix='write router_args=["--request-timeout-secs", "2"]',
        )
    if stub is None:
        options = StubOptions()
    elif isinstance(stub, StubOptions):
        options = stub
    elif isinstance(stub, Mapping):
        options = _stub_options(stub)
    else:
        raise ConfigError(
            "stub must be StubOptions or a dict",
            facts={"got": repr(stub)},
            fix="write stub={'itl_ms': 5}",
        )
    for name, value in (("prefill", prefill), ("decode", decode)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise ConfigError(
                f"{name} must be an integer", facts={"got": repr(value)}, fix=f"write {name}=1"
            )
    spec = TopologySpec(
        prefill=prefill,
        decode=decode,
        router_args=tuple(router_args),
        stub=options,
        router=router_spec(router),
        worker_protocol=worker_protocol,
        prefill_worker=worker_spec(prefill_worker, "prefill"),
        decode_worker=worker_spec(decode_worker, "decode"),
    )
    return MarkerArgs(spec=spec, runtime=runtime)


def router_spec(router: str | RouterSpec | Mapping[str, Any] | None) -> RouterSpec:
    """``router=`` as a kind name, a dict of RouterSpec fields, or a RouterSpec."""
    if router is None:
        return RouterSpec()
    if isinstance(router, RouterSpec):
        return router
    if isinstance(router, str):
        return RouterSpec(kind=router)
    fix = "write router='sglang-router' or router={'kind': 'command', ...}"
    spec: RouterSpec = spec_from(
        RouterSpec, router, "router", "router must be a kind name or a dict", fix
    )
    return spec


def _stub_options(given: Mapping[str, Any]) -> StubOptions:
    """Stub options checked against their StubOptions types: a bad one would otherwise surface
    only as a stub that refuses its command line (or an unhashable topology spec)."""
    check_fields(StubOptions, given, "stub option(s)", "pytest_wedge.StubOptions")
    check_values("stub option", given, typing.get_type_hints(StubOptions))
    # A list (from TOML, or written so) is kept as a tuple, so the spec stays hashable.
    values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in given.items()}
    return StubOptions(**values)


def parse_keywords(args: Sequence[Any], kwargs: Mapping[str, Any]) -> MarkerArgs:
    """Parse ``wedge(...)``'s arguments; any misuse becomes a ConfigError naming the fix."""
    if args:
        raise ConfigError(
            "The wedge marker takes keyword arguments only",
            facts={"positional": repr(tuple(args))},
            fix="write @pytest.mark.wedge(prefill=1, decode=1)",
        )
    known = inspect.signature(wedge).parameters
    for key in kwargs:
        if key not in known:
            guess = close_match(key, known)
            raise ConfigError(
                f"unknown wedge() keyword {key!r}"
                + (f" \N{EM DASH} did you mean {guess!r}?" if guess else ""),
                facts={"valid keywords": ", ".join(known)},
                fix=f"write {guess}=..." if guess else "use only the valid keywords above",
            )
    return wedge(**kwargs)
