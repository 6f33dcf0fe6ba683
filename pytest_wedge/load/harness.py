"""The harness: agents doing rounds of tool calls, the load that wedged in the incidents.
One Faker per load, seeded per agent: a Faker per agent cost more than sending did.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from faker import Faker

from pytest_wedge.load.background import BackgroundLoad, ClientKind, prompt_seed
from pytest_wedge.load.client_ledger import ClientLedger, RequestRecord
from pytest_wedge.load.exchange import ChatClient

RETRYABLE_STATES = frozenset({"error", "timeout"})


@dataclass(frozen=True)
class _Script:
    """What one agent says: its opening messages and, per round, its tool call and result."""

    opening: list[dict[str, Any]]
    turns: list[tuple[dict[str, Any], dict[str, Any]]]


def _script(fake: Faker, seed: int, agent: int, rounds: int) -> _Script:
    # Synchronous from seeding to the end: agents sharing one Faker never interleave here, so
    # the prompts stay the same whatever order the agents are scheduled in.
    fake.seed_instance(seed * 100_003 + agent)
    tools = [f"{fake.word()}_{fake.word()}" for _ in range(3)]
    opening = [
        {
            "role": "system",
            "content": f"You are agent {agent}. {fake.sentence()} Tools: {', '.join(tools)}",
        },
        {"role": "user", "content": fake.paragraph(nb_sentences=2)},
    ]
    turns = []
    for round_ in range(rounds):
        call_id = f"call_{agent}_{round_}"
        tool = fake.random_element(tools)
        call = {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {
                        "name": tool,
                        "arguments": json.dumps({"query": fake.sentence(nb_words=4)}),
                    },
                }
            ],
        }
        turns.append((call, {"role": "tool", "tool_call_id": call_id, "content": fake.sentence()}))
    return _Script(opening, turns)


class Harness(BackgroundLoad):
    """``agents`` agents x ``rounds`` sequential rounds, each retried up to ``retries`` times.

    Bounded twice: by count (agents x rounds x (1 + retries) requests) and by time
    (``max_duration_s``). Each request carries the agent's opening and its past rounds, the
    last ``history_rounds`` of them when set: a real model's context is bounded (2048 tokens
    for the vllm kind's tiny model, about 40 rounds), and agents then drop their oldest rounds.
    With ``leak_streams`` every response is left open after its head and the agent moves on:
    the pool drains one connection per request, and with ``max_connections`` set the rest wait
    for a connection forever, never sent.
    """

    def __init__(
        self,
        base_url: str,
        *,
        agents: int = 30,
        rounds: int = 3,
        origin: str = "harness",
        seed: int | None = None,
        max_tokens: int = 16,
        client_timeout_s: float | None = 30.0,
        retries: int = 0,
        max_connections: int | None = None,
        pool_timeout_s: float | None = None,
        stream: bool = True,
        leak_streams: bool = False,
        think_time_s: float = 0.0,
        history_rounds: int | None = None,
        model: str = "stub-model",
        ledger: ClientLedger | None = None,
        max_duration_s: float = 120.0,
        extra_body: Mapping[str, Any] | None = None,
        path: str = "/v1/chat/completions",
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
            max_connections=max_connections,
            pool_timeout_s=pool_timeout_s,
            max_duration_s=max_duration_s,
            run_id=run_id,
            client=client,
        )
        if agents < 1 or rounds < 1 or retries < 0 or (history_rounds or 0) < 0:
            raise ValueError(
                f"Harness needs agents >= 1, rounds >= 1, retries >= 0 and history_rounds >= 0 "
                f"or None; got agents={agents}, rounds={rounds}, retries={retries}, "
                f"history_rounds={history_rounds}"
            )
        self.agents = agents
        self.rounds = rounds
        self.seed = prompt_seed(seed, self.origin, self.run_id)
        self.retries = retries
        self.stream = stream
        self.leak_streams = leak_streams
        self.think_time_s = think_time_s
        self.history_rounds = history_rounds

    @property
    def max_requests(self) -> int:
        return self.agents * self.rounds * (1 + self.retries)

    async def _run(self, client: ChatClient) -> None:
        fake = Faker()
        async with asyncio.TaskGroup() as group:
            for agent in range(self.agents):
                group.create_task(
                    self._agent(client, fake, agent), name=f"{self.origin}-agent-{agent}"
                )

    async def _agent(self, client: ChatClient, fake: Faker, agent: int) -> None:
        script = _script(fake, self.seed, agent, self.rounds)
        past: list[dict[str, Any]] = []
        for round_, (call, result) in enumerate(script.turns):
            record = await self._round(client, agent, round_, [*script.opening, *self._kept(past)])
            if record.state == "pending":
                continue  # a leaked stream: the agent moves on, as the buggy client did
            past += [call, result]
            if self.think_time_s > 0 and round_ + 1 < self.rounds:
                await asyncio.sleep(self.think_time_s)

    def _kept(self, past: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The past rounds' messages a request carries (two per round)."""
        if self.history_rounds is None:
            return past
        return past[max(0, len(past) - 2 * self.history_rounds) :]

    async def _round(
        self, client: ChatClient, agent: int, round_: int, history: list[dict[str, Any]]
    ) -> RequestRecord:
        retry_of: str | None = None
        for attempt in range(1 + self.retries):
            record = self.new_record(
                f"a{agent}-r{round_}-t{attempt}",
                stream=self.stream,
                agent=agent,
                round=round_,
                attempt=attempt,
                retry_of=retry_of,
            )
            await self.send(client, record, history, leak_stream=self.leak_streams)
            if record.state not in RETRYABLE_STATES:
                break
            retry_of = record.request_id
        return record
