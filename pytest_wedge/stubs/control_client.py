"""The client side of the stub workers' control, ledger and state API.

Only stubs have this API. A foreign component (a real SGLang worker put in a stub's place)
answers 404, which callers treat as "this evidence or fault is unavailable", never as a crash.
"""

from __future__ import annotations

from typing import Any

import httpx

from pytest_wedge.errors import WedgeError
from pytest_wedge.loopback import loopback_client


class StubUnavailable(WedgeError):
    """The component has no stub control API (a foreign worker) or did not answer."""


class StubClient:
    def __init__(self, name: str, base_url: str, timeout_s: float = 2.0) -> None:
        self.name = name
        self.base_url = base_url
        self._http = loopback_client(base_url=base_url, timeout=timeout_s)

    def _call(self, method: str, path: str, json: Any = None) -> Any:
        try:
            response = self._http.request(method, path, json=json)
        except httpx.HTTPError as exc:
            raise StubUnavailable(
                f"{self.name} did not answer {method} {path}",
                facts={"url": self.base_url + path, "error": f"{type(exc).__name__}: {exc}"},
                fix=f"check that {self.name} is running and not paused",
            ) from exc
        if response.status_code == 404:
            raise StubUnavailable(
                f"{self.name} has no stub API at {path} (a foreign worker?)",
                facts={"url": self.base_url + path},
                fix="engine faults and worker ledgers need pytest-wedge's stub workers",
            )
        if not response.is_success:
            raise WedgeError(
                f"{self.name} refused {method} {path}",
                facts={"status": response.status_code, "answer": response.text[:300], "sent": json},
                fix="check the fault's parameters against `pytest-wedge docs creating-faults`",
            )
        return response.json() if response.content else None

    def reset(self) -> None:
        self._call("POST", "/control/reset")

    def add_fault(self, fault: dict[str, Any]) -> None:
        """Add an engine fault; its ``name`` is the key (one name per fault instance)."""
        self._call("POST", "/control/faults", json=fault)

    def remove_fault(self, name: str) -> None:
        """Remove the engine fault of that name only; a name that is gone is no error."""
        self._call("DELETE", f"/control/faults/{name}")

    def faults(self) -> list[dict[str, Any]]:
        """The active engine faults, as the stub reports them (name, kind, origin, params)."""
        result: list[dict[str, Any]] = self._call("GET", "/control/faults")["faults"]
        return result

    def set_watchdogs(self, **settings: float | None) -> None:
        self._call("POST", "/control/watchdogs", json=settings)

    def set_admission(
        self, *, prealloc_slots: int | None = None, slot_on_transfer_failure: str | None = None
    ) -> dict[str, Any]:
        """Set a decode's preallocation slots and slot policy (``released``,
        ``released_after_timeout`` or ``leaked``); a reset restores its command line's."""
        body = {
            k: v
            for k, v in (
                ("prealloc_slots", prealloc_slots),
                ("slot_on_transfer_failure", slot_on_transfer_failure),
            )
            if v is not None
        }
        result: dict[str, Any] = self._call("POST", "/control/admission", json=body)
        return result

    def state(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", "/control/state")
        return result

    def ledger(self, origin: str | None = None) -> dict[str, Any]:
        path = "/ledger" + (f"?origin={origin}" if origin else "")
        result: dict[str, Any] = self._call("GET", path)
        return result

    def metrics(self) -> str:
        return self._http.get("/metrics").text

    def close(self) -> None:
        self._http.close()
