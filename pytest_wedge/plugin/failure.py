"""Which report a test gets, and where it goes: the ``wedge`` section of a failed call (and
its JUnit twin), the artifacts of a kept passing test, and the report of a Ctrl-C'd test,
which has no failure report to carry it and is printed in the terminal summary instead."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from pytest_wedge.plugin.state import HANDLES_KEY, plugin_of

if TYPE_CHECKING:
    from pytest_wedge.handle import Wedge

INTERRUPTED_KEY = pytest.StashKey[list[tuple[str, str]]]()


def _context(item: pytest.Item, outcome: str, error: BaseException | None) -> dict[str, Any]:
    from pytest_wedge.plugin.report import failure_headline

    return {"nodeid": item.nodeid, "outcome": outcome, "failure": failure_headline(error)}


def _extra_evidence(item: pytest.Item) -> Any:
    hook = item.config.hook

    def extra(wedge: Wedge, origin: str) -> list[str]:
        lines = hook.pytest_wedge_diagnose(wedge=wedge, origin=origin)
        return [line for result in lines if result for line in result]

    return extra


def report_call(item: pytest.Item, report: pytest.TestReport, error: BaseException | None) -> None:
    """A failed call gets the wedge section; a passing one keeps its artifacts under
    ``--wedge-keep``. A report that cannot be made says so and never hides the failure."""
    from pytest_wedge.plugin.report import build_report, keep_artifacts

    keep = plugin_of(item.config).value("wedge_keep")
    for handle in item.stash.get(HANDLES_KEY, []):
        try:
            if report.failed:
                text, data = build_report(
                    handle,
                    error=error,
                    extra_evidence=_extra_evidence(item),
                    context=_context(item, report.outcome, error),
                )
                item.config.hook.pytest_wedge_report(wedge=handle, report=data)
                report.sections.append(("wedge", text))
                # Also a JUnit property, for tools that read properties.
                item.user_properties.append(("wedge", text))
            elif keep:
                keep_artifacts(handle, context=_context(item, report.outcome, None))
        except Exception as exc:  # the report must never hide the test's own failure
            report.sections.append(("wedge", f"(the wedge report failed: {exc!r})"))


def report_interrupt(item: pytest.Item, error: KeyboardInterrupt) -> None:
    """Ctrl-C during a test: the report is taken now, before teardown reverts the faults."""
    from pytest_wedge.plugin.report import build_report

    kept = item.config.stash.setdefault(INTERRUPTED_KEY, [])
    for handle in item.stash.get(HANDLES_KEY, []):
        try:
            text, _ = build_report(
                handle,
                error=error,
                extra_evidence=_extra_evidence(item),
                context=_context(item, "interrupted", error),
            )
        except KeyboardInterrupt:
            text = "(the wedge report was interrupted too)"
        except Exception as exc:
            text = f"(the wedge report failed: {exc!r})"
        kept.append((item.nodeid, text))


def interrupted_reports(config: pytest.Config) -> list[tuple[str, str]]:
    return config.stash.get(INTERRUPTED_KEY, [])
