"""The fault registry: the ``kind`` names a scenario file may use, each mapped to its class.

A concrete fault joins it with ``@register`` (above ``@dataclass``). Registration is explicit
so that a base class, a helper or an import never becomes a ``kind`` by accident, and so that
a user's own fault (in a conftest or a plugin) becomes one by the same single line.

``register`` also keeps the fault's old target keywords working: a family that declares
``link = TargetAlias("link")`` accepts ``link=...`` in place of ``target=...``, with a
DeprecationWarning.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import warnings
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, TypeVar

from pytest_wedge.errors import ConfigError
from pytest_wedge.faults.base import Fault, TargetAlias

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
    _accept_legacy_target_keywords(cls)
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


def legacy_target_keywords(cls: type[Fault]) -> list[str]:
    """The deprecated spellings of ``target`` that ``cls`` accepts (``link``, ...)."""
    found = {
        value.keyword
        for klass in cls.__mro__
        for value in vars(klass).values()
        if isinstance(value, TargetAlias)
    }
    return sorted(found)


def _accept_legacy_target_keywords(cls: type[Fault]) -> None:
    keywords = legacy_target_keywords(cls)
    init = cls.__init__
    if not keywords or getattr(init, "_wedge_accepts_legacy_target", False):
        return
    name = cls.__name__

    @functools.wraps(init)  # inspect.signature follows __wrapped__: errors show the real one
    def __init__(self: Fault, *args: Any, **kwargs: Any) -> None:
        for keyword in keywords:
            if keyword not in kwargs:
                continue
            if args or "target" in kwargs:
                raise TypeError(f"{name}() got the target twice: as target and as {keyword}=")
            warnings.warn(
                f"{name}({keyword}=...) is deprecated; use {name}(target=...)",
                DeprecationWarning,
                stacklevel=2,
            )
            kwargs["target"] = kwargs.pop(keyword)
        init(self, *args, **kwargs)

    __init__._wedge_accepts_legacy_target = True  # type: ignore[attr-defined]
    cls.__init__ = __init__  # type: ignore[method-assign]
