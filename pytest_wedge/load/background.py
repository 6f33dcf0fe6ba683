"""Lifecycle shared by every load: its own thread, its own event loop, one shared HTTP client
(aiohttp, or httpx when the pool is the subject: ``max_connections``, ``pool_timeout_s``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import secrets
import threading
import zlib
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, Literal, Self, get_args

import httpx

from pytest_wedge.load.chat_request import Message, send_chat
from pytest_wedge.load.client_ledger import ClientLedger, RequestRecord
from pytest_wedge.load.exchange import (
    ChatClient,
    PoolGauge,
    new_aiohttp_session,
    new_httpx_client,
)

_load_numbers = itertools.count()
ClientKind = Literal["auto", "aiohttp", "httpx"]


def prompt_seed(seed: int | None, origin: str, run_id: str) -> int:
    """``seed``, or by default one of the load's own, from its origin and run id: concurrent
    loads (two harness groups, a harness and a stray) send different prompts, and the same
    ``run_id`` and origin send the same prompts again."""
    return seed if seed is not None else zlib.crc32(f"{origin}-{run_id}".encode())


class BackgroundLoad(ABC):
    """``start() -> self``, ``wait()``, ``stop()``, context manager; subclasses write ``_run``.

    When the load ends (by itself, by ``max_duration_s`` or by ``stop``) none of its records is
    pending: a request cut off after its head was sent ends ``unknown``, one that never left
    the client ends ``aborted`` and keeps ``sent is None``; both are flagged ``cut_by_stop``.
    """

    def __init__(
        self,
        base_url: str,
        *,
        origin: str,
        ledger: ClientLedger | None,
        max_tokens: int,
        client_timeout_s: float | None,
        model: str,
        path: str,
        extra_body: Mapping[str, Any] | None,
        max_connections: int | None = None,
        pool_timeout_s: float | None = None,
        max_duration_s: float = 120.0,
        run_id: str | None = None,
        client: ClientKind = "auto",
    ) -> None:
        if client not in get_args(ClientKind):
            raise ValueError(f"client must be one of {get_args(ClientKind)}; got {client!r}")
        self.base_url = base_url.rstrip("/")
        self.origin = origin
        self.ledger = ledger if ledger is not None else ClientLedger()
        self.max_connections = max_connections
        self.pool_timeout_s = pool_timeout_s
        self.max_duration_s = max_duration_s
        self.max_tokens = max_tokens
        self.client_timeout_s = client_timeout_s
        self.model = model
        self.path = path
        self.extra_body = dict(extra_body or {})
        pooled = max_connections is not None or pool_timeout_s is not None
        self.client_kind: Literal["aiohttp", "httpx"] = (
            ("httpx" if pooled else "aiohttp") if client == "auto" else client
        )
        # Connections this load's requests hold; a request waiting for one carries the count.
        self.pool = PoolGauge(max_connections if self.client_kind == "httpx" else None)
        # Part of every request id: the stubs and router may outlive one test, and ids from
        # two runs must never join. Pass run_id to make ids reproducible.
        self.run_id = run_id if run_id is not None else secrets.token_hex(3)
        self.records: list[RequestRecord] = []
        self.exception: BaseException | None = None
        self.hit_time_bound = False
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._ready = threading.Event()
        self._stop_requested = False
        self._exception_reported = False

    @abstractmethod
    async def _run(self, client: ChatClient) -> None:
        """Send the load; return when it is complete."""

    def new_record(self, suffix: str, **facts: object) -> RequestRecord:
        record = RequestRecord(
            request_id=f"{self.origin}-{self.run_id}-{suffix}",
            origin=self.origin,
            target=self.base_url,
            path=self.path,
            **facts,  # type: ignore[arg-type]
        )
        self.records.append(record)
        return record

    async def send(
        self, client: ChatClient, record: RequestRecord, messages: Sequence[Message], **how: Any
    ) -> RequestRecord:
        """One chat request of this load (``how``: the abort and leak options of send_chat)."""
        return await send_chat(
            client,
            self.ledger,
            record,
            messages=messages,
            max_tokens=self.max_tokens,
            model=self.model,
            timeout_s=self.client_timeout_s,
            extra_body=self.extra_body,
            pool=self.pool,
            **how,
        )

    # lifecycle -------------------------------------------------------------------------------

    def start(self) -> Self:
        if self._thread is not None:
            raise RuntimeError(f"{type(self).__name__}({self.origin}) was already started")
        name = f"wedge-load-{self.origin}-{next(_load_numbers)}"
        self._thread = threading.Thread(target=self._thread_main, name=name, daemon=True)
        self._thread.start()
        self._ready.wait()
        return self

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until the load is done or ``timeout_s`` passes; True if it is done."""
        if self._thread is None:
            raise RuntimeError(f"{type(self).__name__}({self.origin}) was never started")
        self._thread.join(timeout_s)
        done = not self._thread.is_alive()
        if done:
            self._raise_crash()
        return done

    def stop(self, timeout_s: float = 5.0) -> bool:
        """Cancel whatever still runs; True if the loop wound down within ``timeout_s``.

        Either way nothing of this load is pending afterwards: a loop that would not wind down
        (blocked by a synchronous call) has its leftovers finished from this thread.
        """
        if self._thread is None:
            return True
        loop, task = self._loop, self._task
        if not self._stop_requested and loop is not None and task is not None:
            self._stop_requested = True
            # RuntimeError: the loop already closed, the load ended by itself.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(task.cancel)
        self._thread.join(timeout_s)
        clean = not self._thread.is_alive()
        self._finish_leftovers()
        if clean:
            self._raise_crash()
        return clean

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def progress(self) -> int:
        """Records with a final state so far: a count that stops growing means a wedge."""
        return sum(1 for r in list(self.records) if r.final)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # inside the thread -----------------------------------------------------------------------

    def _thread_main(self) -> None:
        try:
            asyncio.run(self._main())
        except asyncio.CancelledError as exc:
            if not self._stop_requested:  # a stop landing in the final cleanup is not a crash
                self.exception = exc
        except BaseException as exc:  # reported to the test thread by wait/stop
            self.exception = exc
        finally:
            self._ready.set()  # never leave start() waiting, even if the loop failed to start

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        client: ChatClient
        if self.client_kind == "httpx":
            client = new_httpx_client(self.max_connections, self.pool_timeout_s)
        else:
            client = new_aiohttp_session()
        self._ready.set()
        try:
            async with asyncio.timeout(self.max_duration_s):
                await self._run(client)
        except TimeoutError:
            self.hit_time_bound = True
        except asyncio.CancelledError:
            if not self._stop_requested:
                raise
        finally:
            # Finish first: closing the client can be interrupted, the accounting must not be.
            self._finish_leftovers()
            await (client.aclose() if isinstance(client, httpx.AsyncClient) else client.close())

    def _finish_leftovers(self) -> None:
        for record in list(self.records):
            record.finish_if_pending(
                "unknown" if record.sent is not None else "aborted",
                error="load stopped while the request was in flight",
            )

    def _raise_crash(self) -> None:
        if self.exception is not None and not self._exception_reported:
            self._exception_reported = True
            raise RuntimeError(
                f"{type(self).__name__}({self.origin}) crashed: {self.exception!r}"
            ) from self.exception
