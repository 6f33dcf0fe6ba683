"""Clients that abort on purpose after some tokens or seconds: incidents 3 (prefill pin) and 4
(abort races). A stream that ends first keeps its true state.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from pytest_wedge.load.background import BackgroundLoad, ClientKind
from pytest_wedge.load.client_ledger import ClientLedger
from pytest_wedge.load.exchange import ChatClient


class Aborter(BackgroundLoad):
    """Send ``count`` requests, ``concurrency`` at a time, each aborted by the client."""

    def __init__(
        self,
        base_url: str,
        *,
        count: int = 1,
        abort_after_tokens: int | None = None,
        abort_after_s: float | None = None,
        origin: str = "aborter",
        concurrency: int | None = None,
        max_tokens: int = 256,
        client_timeout_s: float | None = 30.0,
        max_duration_s: float = 120.0,
        ledger: ClientLedger | None = None,
        model: str = "stub-model",
        path: str = "/v1/chat/completions",
        extra_body: Mapping[str, Any] | None = None,
        run_id: str | None = None,
        client: ClientKind = "auto",
    ) -> None:
        super().__init__(
            base_url,
            origin=origin,
            ledger=ledger,
            max_tokens=max_tokens,
            client_timeout_s=client_timeout_s,
            model=model,
            path=path,
            extra_body=extra_body,
            max_duration_s=max_duration_s,
            run_id=run_id,
            client=client,
        )
        if abort_after_tokens is None and abort_after_s is None:
            raise ValueError("Aborter needs abort_after_tokens or abort_after_s (or both)")
        if count < 0:
            raise ValueError(f"Aborter needs count >= 0; got {count}")
        self.count = count
        self.abort_after_tokens = abort_after_tokens
        self.abort_after_s = abort_after_s
        self.concurrency = concurrency or max(count, 1)

    async def _run(self, client: ChatClient) -> None:
        slots = asyncio.Semaphore(self.concurrency)
        async with asyncio.TaskGroup() as group:
            for n in range(self.count):
                group.create_task(self._one(client, n, slots))

    async def _one(self, client: ChatClient, n: int, slots: asyncio.Semaphore) -> None:
        async with slots:
            await self.send(
                client,
                self.new_record(f"{n}", stream=True),
                [{"role": "user", "content": f"Write a long story, part {n}."}],
                abort_after_tokens=self.abort_after_tokens,
                abort_after_s=self.abort_after_s,
            )
