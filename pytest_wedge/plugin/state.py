"""The plugin's per-process state: resolved settings, the sessions, and the handles of each
test item (opened by the fixtures and by scenario items alike)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_wedge.errors import ConfigError, WedgeError
from pytest_wedge.plugin.settings import SETTINGS, Resolved, anchored, resolve

if TYPE_CHECKING:
    from pytest_wedge.handle import Wedge
    from pytest_wedge.runtime.binaries import FoundToxiproxy
    from pytest_wedge.spec.marker_args import MarkerArgs
    from pytest_wedge.spec.topology import TopologySpec
    from pytest_wedge.topology.session import WedgeSession

# The topology, the handle and their HTTP clients are imported when a test first needs them:
# this module is loaded with the plugin, in every pytest run of an environment that has it.
HANDLES_KEY = pytest.StashKey[list["Wedge"]]()
# The keys under which an xdist controller hands its workers the owner of this run's folder
# and the artifacts directory (absolute): the first worker that needs the folder makes it.
RUN_OWNER_KEY = "wedge_run_owner"
ARTIFACTS_KEY = "wedge_artifacts_dir"


class WedgePlugin:
    """Per-process state: resolved settings and the sessions (one per runtime)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.sessions: dict[str, WedgeSession] = {}
        self._run_dir: Path | None = None
        try:
            self.settings = {name: resolve_from(config, name) for name in SETTINGS}
        except ConfigError as exc:
            raise pytest.UsageError(str(exc)) from exc
        self.settings["wedge_artifacts"] = anchored(
            self.settings["wedge_artifacts"], rootdir=config.rootpath, inifile=config.inipath
        )

    def value(self, name: str) -> Any:
        return self.settings[name].value

    def check_binaries(self) -> None:
        """Fail the run up front, with the fix, when a program the topology needs is missing
        (or the artifacts directory cannot be made)."""
        from pytest_wedge.topology.running import find_executables

        try:
            find_executables(self.toxiproxy().path)
            if self.value("wedge_runtime") == "docker":
                from pytest_wedge.runtime.docker import connect

                connect().close()
            self._check_artifacts_dir()
        except WedgeError as exc:
            raise pytest.UsageError(str(exc)) from exc

    def toxiproxy(self) -> FoundToxiproxy:
        """toxiproxy-server by the discovery order (an ini path is relative to the ini file)."""
        from pytest_wedge.runtime.binaries import locate_toxiproxy

        setting = self.settings["wedge_toxiproxy"]
        source = {"command line": "--wedge-toxiproxy"}.get(setting.source, setting.source)
        base = self.config.invocation_params.dir
        inipath = self.config.inipath
        if setting.source == "ini file" and inipath is not None:
            source, base = f"ini wedge_toxiproxy in {inipath}", inipath.parent
        return locate_toxiproxy(
            setting.value, source=source, base_dir=base, rootdir=self.config.rootpath
        )

    def _check_artifacts_dir(self) -> None:
        try:
            Path(self.value("wedge_artifacts")).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise self._unwritable("the artifacts directory", exc) from exc

    def _unwritable(self, what: str, exc: OSError) -> ConfigError:
        setting = self.settings["wedge_artifacts"]
        return ConfigError(
            f"Cannot create {what} {setting.given!r}",
            facts={"from": setting.source, "resolved to": setting.value, "error": exc},
            fix="pass --wedge-artifacts=DIR (or ini wedge_artifacts) naming a directory "
            "this user can create and write",
        )

    def run_owner(self) -> tuple[str, Path]:
        """Who owns this run's folder and where it goes: this process, or, in an xdist
        worker, its controller (so one run is one folder whatever ``-n`` is)."""
        given = getattr(self.config, "workerinput", {})
        if RUN_OWNER_KEY in given:
            return given[RUN_OWNER_KEY], Path(given[ARTIFACTS_KEY])
        from pytest_wedge.plugin.run_folders import this_process

        return this_process(), Path(self.value("wedge_artifacts")).absolute()

    def run_dir(self) -> Path:
        """This run's artifacts folder (``run-N``), made on first use."""
        if self._run_dir is not None:
            return self._run_dir
        from pytest_wedge.plugin.run_folders import make_run_dir

        owner, base = self.run_owner()
        try:
            self._run_dir = make_run_dir(base, self.value("wedge_keep_runs"), owner=owner)
        except OSError as exc:
            raise self._unwritable("this run's folder in the artifacts directory", exc) from exc
        return self._run_dir

    def session(self, runtime: str | None = None) -> WedgeSession:
        runtime = runtime or self.value("wedge_runtime")
        assert runtime is not None
        existing = self.sessions.get(runtime)
        if existing is not None:
            return existing
        from pytest_wedge.topology.session import WedgeSession

        hook = self.config.hook

        def factory(name: str, artifacts_dir: str, session_id: str) -> Any:
            from pytest_wedge.runtime import make_runtime

            where = {"name": name, "artifacts_dir": artifacts_dir, "session_id": session_id}
            custom = hook.pytest_wedge_make_runtime(**where)
            return custom if custom is not None else make_runtime(**where)

        session = WedgeSession(
            runtime=runtime,
            artifacts_dir=self.run_dir(),
            toxiproxy_binary=self.toxiproxy().path,
            runtime_factory=factory,
            ready_timeout_s=self.value("wedge_ready_timeout"),
        )
        self.sessions[runtime] = session
        return session.start()

    def close(self) -> None:
        for session in self.sessions.values():
            session.close()
        self.sessions.clear()
        if not hasattr(self.config, "workerinput"):  # the owner ends the run, not a worker
            from pytest_wedge.plugin.run_folders import release_run_dir

            owner, base = self.run_owner()
            release_run_dir(base, owner)


PLUGIN_KEY = pytest.StashKey[WedgePlugin]()


def resolve_from(config: pytest.Config, name: str, *, marker: Any = None) -> Resolved:
    """One setting by the precedence rule, from pytest's option and ini of that name."""
    return resolve(name, marker=marker, cli=config.getoption(name, None), ini=config.getini)


def plugin_of(config: pytest.Config) -> WedgePlugin:
    return config.stash[PLUGIN_KEY]


@contextlib.contextmanager
def plain_errors(config: pytest.Config) -> Iterator[None]:
    """A topology that cannot come up fails the test with our error text alone (it has the log
    tail and the fix; ``--full-trace`` still shows the traceback)."""
    try:
        yield
    except WedgeError as exc:
        if config.getoption("fulltrace"):
            raise
        raise pytest.fail.Exception(f"{type(exc).__name__}: {exc}", pytrace=False) from None


def marker_args(
    item: pytest.Item, args: Sequence[Any], kwargs: Mapping[str, Any], *, what: str
) -> MarkerArgs:
    """The topology and runtime that ``what`` (the marker, or a factory call) asks for; a
    mistake fails this one test, at setup."""
    from pytest_wedge.spec.marker_args import parse_keywords

    try:
        parsed = parse_keywords(args, kwargs)
        if parsed.runtime is not None:
            resolve_from(item.config, "wedge_runtime", marker=parsed.runtime)
    except ConfigError as exc:
        # from None: our own frames and the error's chain would print it a second time
        raise pytest.fail.Exception(f"{item.nodeid}: bad {what}\n{exc}", pytrace=False) from None
    return parsed


def open_handle(item: pytest.Item, spec: TopologySpec, runtime: str | None) -> Wedge:
    """A fresh handle onto the session's topology for ``spec``, closed with ``item``."""
    plugin = plugin_of(item.config)
    spec = with_default_router(spec, plugin.value("wedge_router"))
    with plain_errors(item.config):
        topology = plugin.session(runtime).topology(spec)
        topology.reset()
    from pytest_wedge.handle import Wedge

    handles = item.stash.setdefault(HANDLES_KEY, [])
    handle = Wedge(
        topology,
        artifacts_folder(plugin.run_dir(), item.nodeid, len(handles)),
        probe_interval_s=plugin.value("wedge_probe_interval"),
    )
    handles.append(handle)
    return handle


def with_default_router(spec: TopologySpec, kind: str) -> TopologySpec:
    """``spec`` on the ``--wedge-router`` kind, when it runs the default router (smg)."""
    import dataclasses

    from pytest_wedge.routers.router_spec import RouterSpec

    if spec.router != RouterSpec() or kind == "smg":
        return spec
    return dataclasses.replace(spec, router=RouterSpec(kind=kind))


def artifacts_folder(run_dir: Path, nodeid: str, index: int) -> Path:
    """``<run>/tests/<test id>``; a test's second topology (``wedge_factory``) gets its own
    folder, ``<test id>@2``, so two topologies never write over each other's artifacts."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid)[-120:]
    return run_dir / "tests" / (safe if index == 0 else f"{safe}@{index + 1}")


def close_handles(item: pytest.Item) -> None:
    errors: list[str] = []
    for handle in item.stash.get(HANDLES_KEY, []):
        errors += handle.close()
    if errors:
        raise WedgeError(
            "Some faults could not be applied or reverted",
            facts={"errors": "; ".join(errors)},
            fix="the next test resets the topology; check the component logs",
        )
