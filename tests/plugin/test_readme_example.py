"""The README's example test runs as written, so the README cannot drift from the API."""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.timeout(120)


def test_readme_example_passes(pytester, request):
    readme = (request.config.rootpath / "README.md").read_text()
    example = re.search(r"```python\n(.*?)```", readme, re.S)
    assert example, "README.md has no python example"
    pytester.makepyfile(test_readme=example.group(1))
    toxiproxy = request.config.rootpath / "bin" / "toxiproxy-server"
    result = pytester.runpytest_subprocess(
        f"--wedge-toxiproxy={toxiproxy}", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=1)
