"""The wedge text in its JUnit test case's ``<system-out>``, which CI views show (they ignore
``<properties>``), through junitxml's node reporter: pytest has no public way to add to it.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from _pytest.junitxml import bin_xml_escape, xml_key

HEADER = "-" * 29 + " wedge report " + "-" * 29


class WedgeJUnit:
    """Registered when ``--junitxml`` is on; under xdist only the controller writes XML."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(trylast=True)  # after junitxml's own hook has opened the test case
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" and any(name == "wedge" for name, _ in report.sections):
            add_system_out(self.config, report)


def add_system_out(config: pytest.Config, report: pytest.TestReport) -> None:
    """Append the report's ``wedge`` sections to its test case's ``system-out`` (joining
    pytest's own when ``junit_logging`` wrote one)."""
    xml = config.stash.get(xml_key, None)
    if xml is None:
        return
    text = "".join(f"{HEADER}\n{content}\n" for name, content in report.sections if name == "wedge")
    reporter = xml.node_reporter(report)
    existing = [node for node in reporter.nodes if node.tag == "system-out"]
    if existing:
        existing[0].text = f"{existing[0].text or ''}\n{bin_xml_escape(text)}"
    else:
        element = ET.Element("system-out")
        element.text = bin_xml_escape(text)
        reporter.append(element)
