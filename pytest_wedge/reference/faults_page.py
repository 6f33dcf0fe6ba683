"""docs/reference/faults.md: every registered fault kind, its signature and its fields."""

from __future__ import annotations

import inspect
import sys

from pytest_wedge.faults import FAULT_REGISTRY, Fault
from pytest_wedge.reference.introspect import Entry, field_entries, own_docstring
from pytest_wedge.reference.markdown import code, entry_table, page, prose, table

# Each fault module's family, in the order a request meets them: the network, the components,
# the engines inside them.
FAMILIES = {"network": "network", "process_actions": "component", "engine": "engine"}

INTRO = """\
Every fault kind that ships with pytest-wedge, from its registry
(`pytest_wedge.faults.FAULT_REGISTRY`). In a test, apply one for a block with
`with wedge.fault(Pause("router")):`. In a scenario file, the class name is the
`kind` and the fields are keys, beside `at_s` (seconds after the faults are scheduled) and
`for_s` (seconds from apply to revert):

```toml
[[faults]]
kind = "Latency"
target = "router->decode-0"
latency_ms = 500
at_s = 2.0
```

A field's meaning is its attribute docstring in the code. To add a fault of your own, see
[creating-faults.md](../creating-faults.md)."""


def package_faults() -> dict[str, type[Fault]]:
    """The registry's faults that ship with pytest-wedge. A user's own fault, registered by a
    conftest or a plugin in the same process, belongs to the user's docs, not these."""
    ours = FAULT_REGISTRY.items()
    return {name: cls for name, cls in ours if cls.__module__.startswith("pytest_wedge.")}


def fault_entries(cls: type[Fault]) -> list[Entry]:
    return field_entries(cls)


def _signature(cls: type[Fault]) -> str:
    parts: list[str] = []
    star = False
    for param in inspect.signature(cls).parameters.values():
        if param.kind is param.KEYWORD_ONLY and not star:
            parts.append("*")
            star = True
        default = "" if param.default is param.empty else f"={param.default!r}"
        parts.append(param.name + default)
    return f"{cls.__name__}({', '.join(parts)})"


def _facts(cls: type[Fault]) -> list[str]:
    facts = []
    toxic = getattr(cls, "toxic_type", None)
    if isinstance(toxic, str):
        facts.append(f"Toxiproxy toxic {code(toxic)}")
    kind = getattr(cls, "kind", None)
    if isinstance(kind, str):
        facts.append(f"stub fault {code(kind)}")
    roles = getattr(cls, "roles", None)
    if isinstance(roles, tuple):
        facts.append(f"applies to {' and '.join(roles)} workers")
    return facts


def _section(cls: type[Fault]) -> list[str]:
    lines = [f"### `{cls.__name__}`", "", "```python", _signature(cls), "```", ""]
    doc = own_docstring(cls)
    if doc:
        lines += [prose(doc), ""]
    facts = _facts(cls)
    if facts:
        text = "; ".join(facts)
        lines += [f"{text[0].upper()}{text[1:]}.", ""]
    return [*lines, *entry_table(fault_entries(cls)), ""]


def _module_title(module: str) -> str:
    doc = inspect.getdoc(sys.modules[module]) or module
    return doc.split("\n\n")[0].replace("\n", " ")


def _summary() -> list[str]:
    rows = []
    for name, cls in sorted(package_faults().items(), key=lambda kv: _order(kv[1].__module__)):
        first = prose(own_docstring(cls)).split("\n\n")[0].split(". ")[0].rstrip(".")
        rows.append((f"[`{name}`](#{name.lower()})", _family(cls.__module__), first))
    return table(("kind", "family", "what it does"), rows)


def _family(module: str) -> str:
    basename = module.rpartition(".")[2]
    return FAMILIES.get(basename, basename)


def _order(module: str) -> int:
    order = list(FAMILIES.values())
    return order.index(_family(module)) if _family(module) in order else len(order)


def render() -> str:
    by_module: dict[str, list[type[Fault]]] = {}
    for cls in package_faults().values():
        by_module.setdefault(cls.__module__, []).append(cls)
    body = [*_summary(), ""]
    for module in sorted(by_module, key=_order):
        body += [f"## {_family(module).capitalize()} faults", "", prose(_module_title(module)), ""]
        for cls in by_module[module]:
            body += _section(cls)
    return page("Faults", INTRO, body)
