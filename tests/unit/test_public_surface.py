"""The package root is the public surface: every name resolves, importing it stays cheap, and
the handle's load methods spell out exactly the keywords of the loads they start."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

import pytest_wedge
from pytest_wedge.load import Harness, StrayRequester

# Set by the handle itself: the address, the test's ledger.
SET_BY_THE_HANDLE = {"base_url", "ledger"}


def test_every_public_name_resolves() -> None:
    for name in pytest_wedge.__all__:
        assert getattr(pytest_wedge, name) is not None, name


def test_importing_the_package_imports_no_client_library() -> None:
    heavy = ("httpx", "aiohttp", "faker", "prometheus_client")
    code = f"import sys, pytest_wedge; print([m for m in {heavy!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("method", "load"), [("harness", Harness), ("stray", StrayRequester)], ids=["harness", "stray"]
)
def test_the_handle_offers_every_keyword_of_the_load(method: str, load: type) -> None:
    handle = {
        name: param.default
        for name, param in inspect.signature(getattr(pytest_wedge.Wedge, method)).parameters.items()
        if param.kind is param.KEYWORD_ONLY
    }
    own = {
        name: param.default
        for name, param in inspect.signature(load).parameters.items()
        if name not in SET_BY_THE_HANDLE
    }
    assert handle.pop("model") is None  # None: the topology's stub model
    own.pop("model")
    assert handle == own
