"""``ComponentSpec``: how one component starts, pure data that any runtime can run. Nothing
here is stub-specific, so a user's own worker or router build can take a stub's place."""

from __future__ import annotations

import collections.abc
import contextlib
import dataclasses
import functools
import inspect
import sys
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal, ParamSpec, TypeVar

from pytest_wedge.errors import ConfigError, FieldTypeError, close_match
from pytest_wedge.routers.template import split_template

Role = Literal["router", "prefill", "decode", "toxiproxy"]
LEDGERLESS_FLAG = "--ledgerless"  # the stubs' flag that switches off ledger and control API
STUB_MODULE = "pytest_wedge.stubs"


@dataclass(frozen=True)
class ComponentSpec:
    name: str
    role: Role
    argv: tuple[str, ...]
    ready_url: str
    ports: tuple[int, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    # From a user's command: known only by its public endpoints (even when it launches our
    # stub) and spawned as written, never forked, so its PID is the command's own.
    foreign: bool = False

    @property
    def is_stub(self) -> bool:
        """A stub with its control API: a ledger-less one shows only public endpoints."""
        return not self.foreign and STUB_MODULE in self.argv and LEDGERLESS_FLAG not in self.argv


def check_fields(cls: Any, given: Mapping[str, Any], what: str, where: str) -> None:
    """Refuse the keys of ``given`` that are not fields of the dataclass ``cls`` (``where``)."""
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(given) - known)
    if unknown:
        hints = [f"{close} (for {name})" for name in unknown if (close := close_match(name, known))]
        raise ConfigError(
            f"Unknown {what}: {', '.join(unknown)}",
            facts={
                "known": ", ".join(sorted(known)),
                **({"did you mean": "; ".join(hints)} if hints else {}),
            },
            fix=f"use only the fields of {where}",
        )


# -- field types: one check, from the annotations, for constructors and scenario files alike ---

_NAMES = {
    float: ("a number", "numbers"),
    int: ("an integer", "integers"),
    str: ("a string", "strings"),
    bool: ("true or false", "booleans"),
}
_SEQUENCES = (tuple, list, collections.abc.Sequence)


def matches_hint(value: Any, hint: Any) -> bool:
    """Whether ``value`` fits the type hint ``hint`` (the hints constructors here use)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any or isinstance(hint, (str, TypeVar)):
        return True  # a hint we cannot read: nothing to check against
    if origin in (typing.Union, types.UnionType):
        return any(matches_hint(value, a) for a in args)
    if origin is Literal:
        return value in args
    if hint is type(None):
        return value is None
    if hint in (int, float) and isinstance(value, bool):
        return False
    if hint is float:
        return isinstance(value, (int, float))
    if origin in _SEQUENCES:
        # A list fits a tuple: TOML has only lists (the constructors keep a tuple).
        kinds = (list, tuple) if origin is tuple else origin
        if isinstance(value, str) or not isinstance(value, kinds):
            return False
        if origin is tuple and args and args[-1] is not Ellipsis:
            return len(value) == len(args) and all(map(matches_hint, value, args))
        return not args or all(matches_hint(v, args[0]) for v in value)
    if origin in (dict, Mapping, collections.abc.Mapping):
        return isinstance(value, Mapping) and (
            not args
            or all(matches_hint(k, args[0]) and matches_hint(v, args[1]) for k, v in value.items())
        )
    if origin is not None:
        return isinstance(value, origin)
    return isinstance(value, hint) if isinstance(hint, type) else True


def describe_hint(hint: Any) -> str:
    """A hint as a reader of an error wants it: ``an integer``, ``a list of strings``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(describe_hint(a) for a in args)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if hint is type(None):
        return "None"
    if hint in _NAMES:
        return _NAMES[hint][0]
    if origin in _SEQUENCES:
        inner = args[0] if args else Any
        return f"a list of {_NAMES.get(inner, (0, 'values'))[1]}"
    if origin in (dict, Mapping, collections.abc.Mapping):
        return "a table (a dict)"
    if origin is collections.abc.Callable:
        return "a callable"
    return f"a {getattr(hint, '__name__', str(hint))}"


def check_values(owner: str, values: Mapping[str, Any], hints: Mapping[str, Any]) -> None:
    """A FieldTypeError for the first value of ``values`` that does not fit its hint."""
    for name, value in values.items():
        if name in hints and not matches_hint(value, hints[name]):
            raise FieldTypeError(owner, name, describe_hint(hints[name]), value)


def _hints(obj: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(obj)
    except Exception:  # a hint names what only a type checker imports: check the others
        pass
    hints: dict[str, Any] = {}
    owners = reversed(obj.__mro__) if isinstance(obj, type) else [inspect.unwrap(obj)]
    for owner in owners:
        module = sys.modules.get(owner.__module__)
        namespace = getattr(owner, "__globals__", vars(module) if module else {})
        own = vars(owner) if isinstance(owner, type) else {"__annotations__": owner.__annotations__}
        for name, hint in own.get("__annotations__", {}).items():
            with contextlib.suppress(Exception):
                # A string hint (postponed annotations) read in its module, as typing does.
                hints[name] = eval(hint, namespace) if isinstance(hint, str) else hint
    return hints


def check_field_types(instance: Any) -> None:
    """Check a dataclass instance's ``__init__`` fields against their annotations."""
    cls = type(instance)
    values = {f.name: getattr(instance, f.name) for f in dataclasses.fields(instance) if f.init}
    check_values(f"{cls.__name__} field", values, _hints(cls))


P = ParamSpec("P")
R = TypeVar("R")


def typed(func: Callable[P, R]) -> Callable[P, R]:
    """Check a function's arguments against its annotations on every call."""
    signature = inspect.signature(func)

    @functools.wraps(func)
    def checked(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return func(*args, **kwargs)  # Python's own error for a wrong call
        check_values(f"{func.__name__}() argument", bound.arguments, _hints(func))
        return func(*args, **kwargs)

    return checked


_PORT_LISTS = ("bootstrap_ports", "prefill_listen", "decode_listen")


def spec_from(cls: Any, value: Any, what: str, headline: str, fix: str) -> Any:
    """A ``RouterSpec``/``WorkerSpec`` from a dict of its fields (lists become tuples)."""
    if not isinstance(value, Mapping):
        raise ConfigError(headline, facts={"got": repr(value)}, fix=fix)
    check_fields(cls, value, f"{what} setting(s)", f"{cls.__module__}.{cls.__name__}")
    values = dict(value)
    if "command" in values:
        values["command"] = split_template(values["command"])
    if "urls" in values:
        values["urls"] = tuple(values["urls"])
    for name in _PORT_LISTS:
        if name in values:
            values[name] = tuple(int(v) for v in values[name])
    if "kv_listen" in values:
        values["kv_listen"] = tuple(tuple(int(p) for p in ports) for ports in values["kv_listen"])
    return cls(**values)
