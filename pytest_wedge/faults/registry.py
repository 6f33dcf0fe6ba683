"""The fault registry: the ``kind`` names a scenario file may use. ``@register`` (above
``@dataclass``) is explicit, so a base class never becomes a kind by accident.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from types import MappingProxyType
from typing import TypeVar

from pytest_wedge.errors import ConfigError
from pytest_wedge.faults.fault import Fault

FaultClass = TypeVar("FaultClass", bound=type[Fault])

_by_name: dict[str, type[Fault]] = {}
FAULT_REGISTRY: Mapping[str, type[Fault]] = MappingProxyType(_by_name)
"""Kind name -> fault class, read-only; live, so later registrations show up."""


def register(cls: FaultClass) -> FaultClass:
    """Make ``cls`` a fault kind, named by its class name, for scenario files and the catalog."""
    if not (isinstance(cls, type) and issubclass(cls, Fault)):
        raise TypeError(f"register() takes a Fault subclass, got {cls!r}")
    unset = _unset_class_vars(cls)
    if inspect.isabstract(cls) or not dataclasses.is_dataclass(cls) or unset:
        raise TypeError(
            f"register() takes a concrete fault dataclass; {cls.__name__} is not"
            + (f" (it leaves {', '.join(unset)} unset: a base class)" if unset else "")
        )
    name = cls.__name__
    known = _by_name.get(name)
    # The same class seen again (a module reloaded) replaces itself; another class may not.
    if known is not None and _qualified(known) != _qualified(cls):
        raise ConfigError(
            f"Two faults are registered as {name!r}",
            facts={"first": _qualified(known), "second": _qualified(cls)},
            fix="rename one of the classes: the class name is the scenario file's kind",
        )
    _by_name[name] = cls
    return cls


def _unset_class_vars(cls: type) -> list[str]:
    """ClassVars declared without a value (``Toxic.toxic_type``, ``EngineFault.kind``)."""
    declared = {
        name
        for klass in cls.__mro__
        for name, hint in vars(klass).get("__annotations__", {}).items()
        if str(hint).startswith(("ClassVar", "typing.ClassVar"))
    }
    return sorted(name for name in declared if not hasattr(cls, name))


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"
