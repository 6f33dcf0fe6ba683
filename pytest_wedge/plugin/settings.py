"""Settings resolved once: marker > command line > environment > ini > default. A resolved
value remembers its source, so an error can say "--wedge-runtime=dokcer (from the command line)".
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pytest_wedge.errors import ConfigError, close_match


@dataclass(frozen=True)
class Setting:
    name: str  # ini name; the option is --wedge-<name with dashes>
    help: str
    default: Any
    choices: tuple[str, ...] = ()
    allow_zero: bool = False
    kind: str = ""  # "paths" for a list of directories; otherwise the default's type decides
    const: str | None = None  # the value of the bare flag, for an option with an optional value
    has_option: bool = True  # False: an ini (and environment) setting only

    @property
    def env(self) -> str:
        return "PYTEST_" + self.name.upper()

    @property
    def option(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def ini_type(self) -> Literal["paths", "bool"] | None:
        if self.kind == "paths":
            return "paths"
        return "bool" if isinstance(self.default, bool) else None

    def option_kwargs(self) -> dict[str, Any]:
        if isinstance(self.default, bool):
            return {"action": "store_const", "const": True}
        if self.const is not None:
            return {"nargs": "?", "const": self.const, "metavar": "NAMES"}
        return {}


SCENARIOS_HELP = (
    "Run the scenario catalog (node ids wedge-scenarios::NAME): all scenarios, the "
    "comma-separated NAMES, or 'list' to print the catalog. On the command line without test "
    "paths, only the catalog runs; set in the ini file, it is added to pytest's default run."
)

SETTINGS: dict[str, Setting] = {
    s.name: s
    for s in (
        Setting(
            "wedge_scenarios",
            SCENARIOS_HELP,
            None,
            const="all",
        ),
        Setting(
            "wedge_scenario_dirs",
            "Directories of your own scenario files (*.toml), added to the catalog "
            "(environment: separated by the OS path separator).",
            (),
            kind="paths",
            has_option=False,
        ),
        Setting(
            "wedge_runtime",
            "How components run: 'process' (local subprocesses) or 'docker' (containers).",
            "process",
            choices=("process", "docker"),
        ),
        Setting(
            "wedge_router",
            "The router kind of every topology that does not name another: 'smg' (default), "
            "'sglang-router' or 'vllm-router' (each pinned, in its own cached venv).",
            "smg",
            choices=("smg", "sglang-router", "vllm-router"),
        ),
        Setting(
            "wedge_toxiproxy",
            "Path of the toxiproxy-server binary (an ini value is relative to the ini file; "
            "default: the venv's bin/, the rootdir's bin/, $GOBIN, then PATH).",
            None,
        ),
        Setting(
            "wedge_artifacts",
            "Directory for wedge reports, ledgers, logs and timelines: one run-N folder per "
            "run (latest links to the newest), one folder per test inside it. A relative path "
            "is relative to the rootdir (an ini value: to the ini file's folder), never to the "
            "working directory.",
            ".wedge-artifacts",
        ),
        Setting(
            "wedge_keep",
            "Keep artifacts of passing tests too (by default only failures keep theirs).",
            False,
        ),
        Setting(
            "wedge_keep_runs",
            "How many runs' artifact folders (run-N under the artifacts directory) to keep, "
            "the newest; older ones are removed when a run starts (0 keeps every run).",
            3,
            allow_zero=True,
        ),
        Setting(
            "wedge_probe_interval",
            "Seconds between probe samples of every component during a test (0 turns it off).",
            1.0,
            allow_zero=True,
        ),
        Setting(
            "wedge_ready_timeout",
            "Seconds a topology may take from start to ready before the start fails. A url "
            "worker that refuses every connection fails after 3 s, unless this is above 30 "
            "(then it is waited on for all of it, as a worker started alongside the run).",
            30.0,
        ),
    )
}


@dataclass(frozen=True)
class Resolved:
    value: Any
    source: str  # "marker", "command line", "environment (VAR)", "ini file", "default"
    given: Any = None  # the value as given, when ``value`` was anchored (a relative path)


def _coerce(setting: Setting, raw: Any, source: str) -> Any:
    if raw is None:
        return None
    if setting.kind == "paths":
        if isinstance(raw, str):
            raw = [part for part in raw.split(os.pathsep) if part]
        return tuple(str(path) for path in raw)
    try:
        if isinstance(setting.default, bool):
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off", ""):
                return False
            raise ValueError(f"expected true or false, got {raw!r}")
        if isinstance(setting.default, (int, float)):
            is_int = isinstance(setting.default, int)
            number = int(str(raw).strip()) if is_int else float(raw)
            if number < 0 or (number == 0 and not setting.allow_zero):
                raise ValueError("must be >= 0" if setting.allow_zero else "must be > 0")
            return number
    except ValueError as exc:
        raise ConfigError(
            f"Bad value for {setting.name}: {raw!r}",
            facts={"from": source, "problem": str(exc)},
            fix=f"set {setting.option} (or ini {setting.name}) to a valid value: {setting.help}",
        ) from exc
    text = str(raw)
    if setting.choices and text not in setting.choices:
        guess = close_match(text, setting.choices)
        raise ConfigError(
            f"Bad value for {setting.name}: {text!r}",
            facts={
                "from": source,
                "expected one of": ", ".join(setting.choices),
                **({"did you mean": guess} if guess else {}),
            },
            fix=f"use {setting.option}={guess or setting.choices[0]} or one of the values above",
        )
    return text


def resolve(
    name: str,
    *,
    marker: Any = None,
    cli: Any = None,
    ini: Callable[[str], Any] | None = None,
    environ: dict[str, str] | None = None,
) -> Resolved:
    """Resolve one setting by the precedence rule; every value is validated with its source."""
    setting = SETTINGS[name]
    env: dict[str, str] | os._Environ[str] = os.environ if environ is None else environ
    candidates: list[tuple[Any, str]] = [(marker, "marker"), (cli, "command line")]
    candidates.append((env.get(setting.env), f"environment ({setting.env})"))
    if ini is not None:
        ini_value = ini(name)
        candidates.append((ini_value if ini_value not in ("", [], None) else None, "ini file"))
    for raw, source in candidates:
        if raw is not None:
            return Resolved(_coerce(setting, raw, source), source)
    return Resolved(setting.default, "default")


def anchored(setting: Resolved, *, rootdir: Path, inifile: Path | None) -> Resolved:
    """A directory setting as an absolute path: relative to the ini file's folder for an ini
    value, else to the rootdir, so that ``cd tests && pytest`` writes where CI looks."""
    path = Path(setting.value).expanduser()
    if not path.is_absolute():
        base = inifile.parent if setting.source == "ini file" and inifile else rootdir
        path = base / path
    return Resolved(str(path), setting.source, given=setting.value)
