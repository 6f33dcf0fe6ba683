"""Toxiproxy as a component, and a client of its REST API: one pooled httpx client per server
(the few calls we need do not warrant a dependency), imported only when a client is made.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from pytest_wedge.errors import WedgeError
from pytest_wedge.loopback import loopback_client
from pytest_wedge.spec.topology import LOOPBACK, ComponentSpec

if TYPE_CHECKING:
    import httpx

ANY_PORT = f"{LOOPBACK}:0"  # Toxiproxy picks a free port: race-free, unlike choosing one
log = logging.getLogger("pytest_wedge")


def server_component(binary: str, port: int) -> ComponentSpec:
    return ComponentSpec(
        name="toxiproxy",
        role="toxiproxy",
        argv=(binary, "-host", LOOPBACK, "-port", str(port), "-proxy-metrics"),
        ready_url=f"http://{LOOPBACK}:{port}/version",
        ports=(port,),
    )


_FIXES = {
    404: "the topology may have been torn down; faults apply to a running topology",
    409: "a toxic or proxy of that name exists already; each fault instance has its own",
}


class ToxiproxyError(WedgeError):
    """The Toxiproxy API refused a call."""


class ToxiproxyClient:
    """A client for one Toxiproxy server (safe to have several in one process)."""

    def __init__(
        self,
        port: int,
        host: str = LOOPBACK,
        *,
        ready: Future[Any] | None = None,
        restart: Callable[[], None] | None = None,
        timeout_s: float = 10.0,
    ) -> None:
        """``ready``: the server's readiness wait, still running; every call waits for it
        first (and raises its error, if the server never got ready). ``restart``: starts the
        server afresh (and returns once it is ready), for a reset that finds it hung."""
        self.host, self.port = host, port
        self.base_url = f"http://{host}:{port}"
        self.timeout_s = timeout_s
        self._http = loopback_client(base_url=self.base_url, timeout=timeout_s)
        self._ready = ready
        self._restart = restart
        # Every proxy made through this client, at the port it listens on: what a server
        # started afresh must serve again.
        self._proxies: dict[str, dict[str, str]] = {}

    def wait_ready(self) -> None:
        if self._ready is not None:
            self._ready.result()

    def _send(self, method: str, path: str, what: str, json: Any = None) -> httpx.Response:
        import httpx

        self.wait_ready()
        try:
            return self._http.request(method, path, json=json)
        except httpx.HTTPError as exc:
            raise ToxiproxyError(
                f"Toxiproxy did not answer when asked to {what}",
                facts={"server": self.base_url, "error": f"{type(exc).__name__}: {exc}"},
                fix=(
                    "check that toxiproxy-server is running (the session starts it); a running "
                    "one that stopped answering may be deadlocked removing a toxic, and the "
                    "session's next reset starts it afresh"
                ),
            ) from exc

    def _call(
        self, method: str, path: str, what: str, json: Any = None, missing_ok: bool = False
    ) -> Any:
        """One API call; the JSON answer, or None. ``missing_ok``: a 404 is not an error."""
        response = self._send(method, path, what, json)
        if missing_ok and response.status_code == 404:
            return None
        if not response.is_success:
            raise self._refused(response, what, json)
        return response.json() if response.content else None

    def _refused(
        self, response: httpx.Response, what: str, sent: Any, fix: str | None = None
    ) -> ToxiproxyError:
        status = response.status_code
        fix = fix or _FIXES.get(
            status,
            "check the proxy and toxic names and attributes against "
            "`pytest-wedge docs creating-faults`",
        )
        facts = {"status": status, "answer": response.text[:300], "sent": sent}
        return ToxiproxyError(
            f"Toxiproxy refused to {what}", facts={**facts, "server": self.base_url}, fix=fix
        )

    def version(self) -> str:
        return str(self._call("GET", "/version", "report its version")["version"])

    def populate(self, proxies: Iterable[Mapping[str, Any]]) -> dict[str, int]:
        """Create or replace ``{"name", "upstream"[, "listen"]}`` proxies in one call (a stale
        one of the same name never survives); returns each one's listen port. A call that fails
        half-way removes the proxies it did create."""
        body = [{"listen": ANY_PORT, **proxy} for proxy in proxies]
        if not body:
            return {}
        what = f"populate {len(body)} proxies"
        response = self._send("POST", "/populate", what, body)
        created = self._listed_proxies(response)
        if not response.is_success:
            for proxy in created:
                self.delete_proxy(proxy["name"])
            raise self._refused(response, what, body)
        ports = {proxy["name"]: int(str(proxy["listen"]).rsplit(":", 1)[1]) for proxy in created}
        for proxy in body:
            name = proxy["name"]
            listen = f"{LOOPBACK}:{ports[name]}"
            self._proxies[name] = {"name": name, "upstream": proxy["upstream"], "listen": listen}
        return ports

    @staticmethod
    def _listed_proxies(response: httpx.Response) -> list[dict[str, Any]]:
        # On failure too, /populate lists the proxies it created before it stopped.
        try:
            listed = response.json().get("proxies") if response.content else None
        except ValueError:
            listed = None
        return list(listed or [])

    def create_proxy(self, name: str, upstream: str, listen: str = ANY_PORT) -> int:
        """Create (or replace) a proxy; returns the port Toxiproxy chose to listen on."""
        return self.populate([{"name": name, "upstream": upstream, "listen": listen}])[name]

    def delete_proxy(self, name: str) -> None:
        """Idempotent: deleting a proxy that is gone is not an error."""
        self._call("DELETE", f"/proxies/{name}", f"delete proxy {name}", missing_ok=True)
        self._proxies.pop(name, None)

    def add_toxic(self, proxy: str, toxic: dict[str, Any]) -> None:
        what = f"add toxic {toxic.get('name')} to {proxy}"
        self._call("POST", f"/proxies/{proxy}/toxics", what, json=toxic)

    def toxics(self, proxy: str) -> list[dict[str, Any]]:
        found: list[dict[str, Any]]
        found = self._call("GET", f"/proxies/{proxy}/toxics", f"list the toxics of {proxy}")
        return found

    def remove_toxic(self, proxy: str, toxic_name: str) -> None:
        """Idempotent: removing a toxic that is gone is not an error."""
        what = f"remove toxic {toxic_name} from {proxy}"
        self._call("DELETE", f"/proxies/{proxy}/toxics/{toxic_name}", what, missing_ok=True)

    def set_enabled(self, proxy: str, enabled: bool) -> None:
        what = f"{'enable' if enabled else 'disable'} proxy {proxy}"
        self._call("PATCH", f"/proxies/{proxy}", what, json={"enabled": enabled})

    def proxies(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", "/proxies", "list proxies")
        return result

    def reset(self) -> None:
        """Re-enable every proxy and remove every toxic. A server that does not answer (or
        answers 503 once its own 10 s are up) is started afresh with the same proxies, when
        this client can restart it: Toxiproxy 2.12 deadlocks removing a toxic that is still
        sending into a connection whose writer has just closed (the writer waits for the
        toxic collection's lock, which the removal holds while it waits for the toxic), and
        from then on every reset and every call on that proxy hangs."""
        try:
            response = self._send("POST", "/reset", "reset")
        except ToxiproxyError:
            if self._restart is None:
                raise
        else:
            if response.is_success:
                return
            if response.status_code != 503 or self._restart is None:
                raise self._refused(response, "reset", None)
        self._start_afresh()

    def _start_afresh(self) -> None:
        assert self._restart is not None
        log.warning(
            "Toxiproxy at %s did not reset within %g s; starting it afresh with its %d proxies",
            self.base_url,
            self.timeout_s,
            len(self._proxies),
        )
        self._http.close()  # its connections may wait on the hung server still
        self._http = loopback_client(base_url=self.base_url, timeout=self.timeout_s)
        self._restart()
        self.populate(list(self._proxies.values()))

    def metrics(self) -> str:
        response = self._send("GET", "/metrics", "report metrics")
        if not response.is_success:
            raise self._refused(
                response, "report metrics", None, fix="start toxiproxy-server with -proxy-metrics"
            )
        return response.text

    def close(self) -> None:
        self._http.close()
