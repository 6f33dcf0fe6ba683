"""Response shapes (OpenAI and SGLang /generate), SSE framing and chunked error bodies."""

from __future__ import annotations

import json
import time
from typing import Any

from aiohttp import web

from .textgen import RequestInfo

DONE = b"data: [DONE]\n\n"
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def error_json(status: int, message: str) -> dict[str, Any]:
    kind = "BadRequestError" if status < 500 else "InternalServerError"
    return {"object": "error", "message": message, "type": kind, "param": None, "code": status}


async def send_error(request: web.Request, status: int, message: str) -> web.StreamResponse:
    """Chunked on purpose: smg truncates fixed-length error bodies it relays on streams."""
    resp = web.StreamResponse(status=status, headers={"Content-Type": "application/json"})
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    await resp.write(_dumps(error_json(status, message)))
    await resp.write_eof()
    return resp


class Reply:
    """Writes one request's answer in the shape its path asks for, streamed or not."""

    def __init__(self, info: RequestInfo, model: str, request: web.Request) -> None:
        self.info = info
        self.request = request
        self.model = info.model or model
        self.created = int(time.time())
        self.resp: web.StreamResponse | None = None
        self.words: list[str] = []
        self._first = True
        rid = info.request_id
        if info.path == "/v1/chat/completions":
            head = {
                "id": rid,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
            }
            # Pre-rendered halves keep the per-token cost to one small json.dumps.
            self._pre = (
                b"data: " + _dumps(head)[:-1] + b',"choices":[{"index":0,"delta":{"content":'
            )
            self._post = b'},"logprobs":null,"finish_reason":null}]}\n\n'
        elif info.path == "/v1/completions":
            head = {
                "id": rid,
                "object": "text_completion",
                "created": self.created,
                "model": self.model,
            }
            self._pre = b"data: " + _dumps(head)[:-1] + b',"choices":[{"index":0,"text":'
            self._post = b',"logprobs":null,"finish_reason":null}]}\n\n'

    @property
    def started(self) -> bool:
        return self.resp is not None

    async def start(self) -> None:
        request = self.request
        resp = web.StreamResponse(status=200, headers=SSE_HEADERS)
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        self.resp = resp

    async def emit(self, words: list[str]) -> None:
        self.words.extend(words)
        if not self.info.stream:
            return
        if self.resp is None:
            await self.start()
        assert self.resp is not None
        if self.info.path == "/generate":
            await self.resp.write(b"data: " + _dumps(self._generate_body(None)) + b"\n\n")
            return
        if self._first and self.info.path == "/v1/chat/completions" and words:
            self._first = False
            chunk = {
                "id": self.info.request_id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": [
                    {
                        "index": 0,
                        "delta": {"role": "assistant", "content": words[0]},
                        "logprobs": None,
                        "finish_reason": None,
                    }
                ],
            }
            parts = [b"data: " + _dumps(chunk) + b"\n\n"]
            words = words[1:]
        else:
            parts = []
        parts.extend(self._pre + json.dumps(w).encode() + self._post for w in words)
        await self.resp.write(b"".join(parts))

    def _usage(self) -> dict[str, int]:
        n = len(self.words)
        return {
            "prompt_tokens": self.info.prompt_tokens,
            "completion_tokens": n,
            "total_tokens": self.info.prompt_tokens + n,
        }

    def _generate_body(self, finish: str | None) -> dict[str, Any]:
        n = len(self.words)
        meta: dict[str, Any] = {
            "id": self.info.request_id,
            "prompt_tokens": self.info.prompt_tokens,
            "completion_tokens": n,
            "cached_tokens": 0,
            "finish_reason": {"type": finish, "length": n} if finish else None,
        }
        return {"text": "".join(self.words), "meta_info": meta, "index": 0}

    def final_json(self) -> dict[str, Any]:
        text = "".join(self.words)
        base = {"id": self.info.request_id, "created": self.created, "model": self.model}
        if self.info.path == "/v1/chat/completions":
            return {
                **base,
                "object": "chat.completion",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "logprobs": None,
                        "finish_reason": "length",
                    }
                ],
                "usage": self._usage(),
            }
        if self.info.path == "/v1/completions":
            return {
                **base,
                "object": "text_completion",
                "choices": [
                    {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}
                ],
                "usage": self._usage(),
            }
        return self._generate_body("length")

    def _final_chunk(self) -> dict[str, Any]:
        base = {"id": self.info.request_id, "created": self.created, "model": self.model}
        if self.info.path == "/v1/chat/completions":
            return {
                **base,
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "length"}],
            }
        return {
            **base,
            "object": "text_completion",
            "choices": [{"index": 0, "text": "", "logprobs": None, "finish_reason": "length"}],
        }

    async def finish(self) -> web.StreamResponse:
        if not self.info.stream:
            return web.Response(body=_dumps(self.final_json()), content_type="application/json")
        if self.resp is None:
            await self.start()
        assert self.resp is not None
        if self.info.path == "/generate":
            frames = [_dumps(self._generate_body("length"))]
        else:
            frames = [_dumps(self._final_chunk())]
            if self.info.include_usage:
                usage = {
                    "id": self.info.request_id,
                    "object": self._final_chunk()["object"],
                    "created": self.created,
                    "model": self.model,
                    "choices": [],
                    "usage": self._usage(),
                }
                frames.append(_dumps(usage))
        await self.resp.write(b"".join(b"data: " + f + b"\n\n" for f in frames) + DONE)
        await self.resp.write_eof()
        return self.resp

    async def fail(self, status: int, message: str) -> web.StreamResponse:
        """After the head went out the error becomes an SSE frame, as SGLang does."""
        if self.resp is None:
            return await send_error(self.request, status, message)
        frame = {
            "error": {"message": message, "type": error_json(status, "")["type"], "code": status}
        }
        await self.resp.write(b"data: " + _dumps(frame) + b"\n\n" + DONE)
        await self.resp.write_eof()
        return self.resp
