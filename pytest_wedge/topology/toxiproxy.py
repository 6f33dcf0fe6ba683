"""Toxiproxy: finding the server, describing it as a component, and talking to its API.

toxiproxy-python (0.1.1, 2019) works against Toxiproxy 2.12 for proxy and toxic CRUD, but it
keeps the API address in class-level globals and has no PATCH, metrics or reset of its own
kind. Everything about it stays inside this module: calls through it bind the globals under a
lock, and the rest (reset, enable/disable, metrics, listing) go through one pooled httpx client.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import toxiproxy
from toxiproxy.api import APIConsumer
from toxiproxy.exceptions import NotFound

from pytest_wedge.errors import MissingBinaryError, WedgeError
from pytest_wedge.topology.spec import LOOPBACK, ComponentSpec

TOXIPROXY_VERSION = "2.12.0"
INSTALL_HINT = (
    "run `make install` (it builds Toxiproxy v2.12.0 into ./bin), or build it yourself: "
    "`go install -ldflags '-X github.com/Shopify/toxiproxy/v2.Version=2.12.0' "
    "github.com/Shopify/toxiproxy/v2/cmd/server@v2.12.0` and rename $GOBIN/server to "
    "toxiproxy-server; or pass --wedge-toxiproxy=PATH"
)
_GLOBALS = threading.Lock()


def find_toxiproxy(explicit: str | None = None, project_root: Path | None = None) -> str:
    """``--wedge-toxiproxy PATH``, then the project-local ``bin/``, then ``PATH``."""
    tried: list[str] = []
    if explicit:
        tried.append(explicit)
        if os.path.isfile(explicit) and os.access(explicit, os.X_OK):
            return os.path.abspath(explicit)
        raise MissingBinaryError(
            "The toxiproxy-server given by --wedge-toxiproxy is not an executable file",
            facts={"given": explicit},
            fix=INSTALL_HINT,
        )
    roots = [project_root] if project_root else []
    roots.append(Path.cwd())
    for root in roots:
        candidate = root / "bin" / "toxiproxy-server"
        tried.append(str(candidate))
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("toxiproxy-server")
    if found:
        return found
    tried.append("toxiproxy-server on PATH")
    raise MissingBinaryError(
        "toxiproxy-server was not found",
        facts={"looked in": "; ".join(tried)},
        fix=INSTALL_HINT,
    )


def server_component(binary: str, port: int) -> ComponentSpec:
    return ComponentSpec(
        name="toxiproxy",
        role="toxiproxy",
        argv=(binary, "-host", LOOPBACK, "-port", str(port), "-proxy-metrics"),
        ready_url=f"http://{LOOPBACK}:{port}/version",
        ports=(port,),
    )


class ToxiproxyError(WedgeError):
    """The Toxiproxy API refused a call."""


class ToxiproxyClient:
    """A client for one Toxiproxy server (safe to have several in one process)."""

    def __init__(self, port: int, host: str = LOOPBACK) -> None:
        self.host, self.port = host, port
        self.base_url = f"http://{host}:{port}"
        self._http = httpx.Client(base_url=self.base_url, timeout=10.0, trust_env=False)

    @contextmanager
    def _bound(self) -> Iterator[toxiproxy.Toxiproxy]:
        with _GLOBALS:
            APIConsumer.host, APIConsumer.port = self.host, self.port
            yield toxiproxy.Toxiproxy()

    def _check(self, response: httpx.Response, what: str) -> Any:
        if response.is_success:
            return response.json() if response.content else None
        raise ToxiproxyError(
            f"Toxiproxy refused to {what}",
            facts={"status": response.status_code, "answer": response.text[:300],
                   "server": self.base_url},
            fix="check the proxy and toxic names and attributes against docs/creating-faults.md",
        )  # fmt: skip

    def version(self) -> str:
        return str(self._check(self._http.get("/version"), "report its version")["version"])

    def create_proxy(self, name: str, upstream: str, listen: str = f"{LOOPBACK}:0") -> int:
        """Create (or replace) a proxy; returns the port Toxiproxy chose to listen on."""
        with self._bound() as api:
            if name in api.proxies():
                api.destroy(api.get_proxy(name))
            proxy = api.create(upstream=upstream, name=name, listen=listen, enabled=True)
        return int(str(proxy.listen).rsplit(":", 1)[1])

    def delete_proxy(self, name: str) -> None:
        response = self._http.delete(f"/proxies/{name}")
        if response.status_code != 404:
            self._check(response, f"delete proxy {name}")

    def add_toxic(self, proxy: str, toxic: dict[str, Any]) -> None:
        with self._bound() as api:
            try:
                api.get_proxy(proxy).add_toxic(**toxic)
            except NotFound as exc:
                raise ToxiproxyError(
                    f"Toxiproxy has no proxy {proxy!r}", facts={"toxic": toxic},
                    fix="the topology may have been torn down; faults apply to a running topology",
                ) from exc  # fmt: skip

    def remove_toxic(self, proxy: str, toxic_name: str) -> None:
        """Idempotent: removing a toxic that is gone is not an error."""
        response = self._http.delete(f"/proxies/{proxy}/toxics/{toxic_name}")
        if response.status_code != 404:
            self._check(response, f"remove toxic {toxic_name} from {proxy}")

    def set_enabled(self, proxy: str, enabled: bool) -> None:
        self._check(self._http.patch(f"/proxies/{proxy}", json={"enabled": enabled}),
                    f"{'enable' if enabled else 'disable'} proxy {proxy}")  # fmt: skip

    def proxies(self) -> dict[str, Any]:
        result: dict[str, Any] = self._check(self._http.get("/proxies"), "list proxies")
        return result

    def reset(self) -> None:
        """Re-enable every proxy and remove every toxic."""
        self._check(self._http.post("/reset"), "reset")

    def metrics(self) -> str:
        response = self._http.get("/metrics")
        self._check(response, "report metrics") if not response.is_success else None
        return response.text

    def close(self) -> None:
        self._http.close()
