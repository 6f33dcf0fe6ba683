"""The stray requester: open-loop load from another origin, the red herring of incident 1.
Requests go out on schedule whether or not earlier ones finished, bounded by a concurrency cap.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from faker import Faker

from pytest_wedge.load.background import BackgroundLoad, ClientKind, prompt_seed
from pytest_wedge.load.client_ledger import ClientLedger, RequestRecord
from pytest_wedge.load.exchange import ChatClient


class StrayRequester(BackgroundLoad):
    """``rate_per_s`` requests a second to ``base_url`` (router or a worker directly).

    Sent straight to a decode stub it carries no bootstrap fields; the stub copes with that.
    When ``max_concurrency`` requests are in flight the schedule slips rather than bursting
    to catch up later. Bounded by ``max_requests`` and ``max_duration_s``.
    """

    def __init__(
        self,
        base_url: str,
        *,
        rate_per_s: float = 2.0,
        origin: str = "stray-1",
        max_tokens: int = 64,
        max_requests: int = 1000,
        max_duration_s: float = 120.0,
        stream: bool = True,
        ledger: ClientLedger | None = None,
        seed: int | None = None,
        max_concurrency: int = 64,
        client_timeout_s: float | None = 30.0,
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
        if rate_per_s <= 0 or max_requests < 0 or max_concurrency < 1:
            raise ValueError(
                "StrayRequester needs rate_per_s > 0, max_requests >= 0, max_concurrency >= 1; "
                f"got {rate_per_s}, {max_requests}, {max_concurrency}"
            )
        self.rate_per_s = rate_per_s
        self.max_requests = max_requests
        self.stream = stream
        # Each request's slot on its open-loop schedule, as wall-clock time (time.time()).
        self.slots: list[float] = []
        self.seed = prompt_seed(seed, self.origin, self.run_id)
        self.max_concurrency = max_concurrency

    async def _run(self, client: ChatClient) -> None:
        fake = Faker()
        fake.seed_instance(self.seed)
        loop = asyncio.get_running_loop()
        slots = asyncio.Semaphore(self.max_concurrency)
        interval = 1.0 / self.rate_per_s
        next_at = loop.time()
        async with asyncio.TaskGroup() as group:
            for n in range(self.max_requests):
                delay = next_at - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                await slots.acquire()
                self.slots.append(time.time() - (loop.time() - next_at))
                next_at = max(next_at + interval, loop.time())
                record = self.new_record(f"{n}", stream=self.stream)
                messages = [{"role": "user", "content": fake.sentence(nb_words=8)}]
                group.create_task(self._one(client, record, messages, slots))

    async def _one(
        self,
        client: ChatClient,
        record: RequestRecord,
        messages: list[dict[str, Any]],
        slots: asyncio.Semaphore,
    ) -> None:
        try:
            await self.send(client, record, messages)
        finally:
            slots.release()
