"""Self-explaining errors: a headline, the facts that were checked, a log tail, and a fix."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from pathlib import Path


def file_tail(path: Path, lines: int) -> str:
    """The last ``lines`` lines of a log file, for an error's ``log_tail`` ("" if unreadable)."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


class WedgeError(Exception):
    """Base error, read in a CI log by someone who did not write the test: what was checked,
    what was found (``facts``) and what to do (``fix``)."""

    def __init__(
        self,
        headline: str,
        *,
        facts: Mapping[str, object] | None = None,
        log_tail: str = "",
        fix: str = "",
    ) -> None:
        self.headline = headline
        self.facts: dict[str, object] = dict(facts or {})
        self.log_tail = log_tail
        self.fix = fix
        super().__init__(self.render())

    def render(self) -> str:
        lines = [self.headline]
        for key, value in self.facts.items():
            lines.append(f"  {key}: {value}")
        if self.log_tail.strip():
            lines.append("  log tail:")
            lines.extend(f"    | {line}" for line in self.log_tail.rstrip().splitlines())
        if self.fix:
            lines.append(f"To fix this: {self.fix}")
        return "\n".join(lines)


class ConfigError(WedgeError):
    """A bad setting, marker argument or scenario file. The plugin turns it into a UsageError."""


class FieldTypeError(ConfigError, TypeError):
    """A value of the wrong type for a field or parameter, checked against its annotation.
    ``field``, ``expected`` and ``found`` let a scenario file name its own key."""

    def __init__(self, owner: str, field: str, expected: str, found: object) -> None:
        self.field, self.expected, self.found = field, expected, found
        super().__init__(f"Bad {owner} {field}: expected {expected}, got {found!r}")


def close_match(name: str, known: Iterable[str]) -> str | None:
    """The known name ``name`` is most likely a typo of, if any is close enough."""
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
    return close[0] if close else None


class MissingBinaryError(ConfigError):
    """A program the topology needs (toxiproxy-server, smg, docker) is not installed."""


class ComponentStartError(WedgeError):
    """A component exited during start-up or did not become ready before the deadline."""


class PortInUseError(ComponentStartError):
    """A port chosen for a component is already taken by another program."""


class AlreadyRunningError(ComponentStartError):
    """``start`` of a name whose component is still running: the first one would be orphaned."""


class ComponentControlError(WedgeError):
    """A runtime action (stop, kill, pause, resume) on a component failed, so a fault or a
    teardown did not take effect."""
