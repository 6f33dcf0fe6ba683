"""Names, types, defaults and descriptions read out of the code for the reference pages; a field
is described by its *attribute docstring* (the string right below it, as Sphinx reads it).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import re
import textwrap
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

REQUIRED = "required"
# ``collections.abc.Mapping[str, typing.Any]`` reads as ``Mapping[str, Any]``.
_MODULE_PREFIX = re.compile(r"\b(?:[A-Za-z_]\w*\.)+(?=[A-Za-z_]\w*)")


@dataclass(frozen=True)
class Entry:
    """One documented name: a fault's field, a load's option, a ledger field."""

    name: str
    type: str
    default: str
    meaning: str


def own_docstring(cls: type) -> str:
    """The class's own docstring, cleaned; "" for none (nor the signature ``@dataclass``
    writes, nor a base class's)."""
    doc = vars(cls).get("__doc__") or ""
    if doc.startswith(f"{cls.__name__}("):
        return ""
    return inspect.cleandoc(doc)


def _class_node(cls: type) -> ast.ClassDef | None:
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return None
    node = ast.parse(source).body[0]
    return node if isinstance(node, ast.ClassDef) else None


# inspect.getsource parses the class's whole module each time; a base class is read once.
@functools.cache
def _docs_declared_in(cls: type) -> dict[str, str]:
    node = _class_node(cls)
    if node is None:
        return {}
    found: dict[str, str] = {}
    for stmt, after in zip(node.body, node.body[1:], strict=False):
        if (
            isinstance(stmt, ast.AnnAssign)
            and isinstance(stmt.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            found[stmt.target.id] = inspect.cleandoc(after.value.value)
    return found


def attribute_docs(cls: type) -> dict[str, str]:
    """Field name -> attribute docstring; a subclass's own docstring wins over its base's."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is not object:
            docs.update(_docs_declared_in(klass))
    return docs


def type_text(hint: Any) -> str:
    """A type as a reader writes it: ``int | None``, ``'upstream' | 'downstream'``."""
    origin = typing.get_origin(hint)
    if hint is type(None):
        return "None"
    if origin is typing.Literal:
        return " | ".join(repr(arg) for arg in typing.get_args(hint))
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_text(arg) for arg in typing.get_args(hint))
    if isinstance(hint, type) and origin is None:
        return hint.__name__
    return _MODULE_PREFIX.sub("", str(hint))


def default_text(value: Any) -> str:
    return REQUIRED if value is inspect.Parameter.empty else repr(value)


def _field_default(field: dataclasses.Field[Any]) -> str:
    if field.default is not dataclasses.MISSING:
        return repr(field.default)
    if field.default_factory is not dataclasses.MISSING:
        factory: Callable[[], Any] = field.default_factory
        return f"{factory.__module__}.{getattr(factory, '__qualname__', 'factory')}()"
    return REQUIRED


def field_entries(cls: type, meanings: Mapping[str, str] | None = None) -> list[Entry]:
    """Every ``__init__`` field of a dataclass, described by ``meanings`` or else by its
    attribute docstring ("" when neither has it)."""
    hints = typing.get_type_hints(cls)
    docs = attribute_docs(cls)
    described = meanings if meanings is not None else docs
    return [
        Entry(f.name, type_text(hints[f.name]), _field_default(f), described.get(f.name, ""))
        for f in dataclasses.fields(cls)
        if f.init
    ]


def parameter_entries(
    func: Callable[..., Any], meaning: Callable[[str], str], skip: tuple[str, ...] = ("self",)
) -> list[Entry]:
    """Every parameter of ``func`` but ``skip``, described by ``meaning(name)``."""
    hints = typing.get_type_hints(func)
    return [
        Entry(name, type_text(hints.get(name, Any)), default_text(param.default), meaning(name))
        for name, param in inspect.signature(func).parameters.items()
        if name not in skip
    ]
