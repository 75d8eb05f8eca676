"""The OpenAI Chat Completions, OpenAI embeddings and Anthropic Messages wire formats of ``FakeLLMServer``.

Each function turns one scripted ``FakeReply`` into what the real API sends: streamed events
(as the text of each ``data:`` / ``event:`` block), one JSON body, or an error body.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np

from ._fake_script import JSON, FakeReply, FakeToolCall, pieces

__all__ = [
    "anthropic_error",
    "anthropic_message",
    "anthropic_sse",
    "anthropic_trickle",
    "openai_completion",
    "openai_embeddings",
    "openai_error",
    "openai_sse",
    "openai_trickle",
]

# --- streams: what each event's text is -----------------------------------------------------


def openai_sse(reply: FakeReply, model: str, served: int, include_usage: bool) -> list[str]:
    chunks = _openai_chunks(reply, model, served, include_usage)
    if reply.cut_after is not None or reply.trickle > 0:
        # The chunks before the finish chunk, and no end: the connection just closes.
        cut = _openai_chunks(reply, model, served, False)[:-1]
        kept = cut[:1] if reply.trickle > 0 else cut[: reply.cut_after]
        return [f"data: {_utf8(chunk)}\n\n" for chunk in kept]
    if reply.stream_error:
        message = reply.error_message or f"fake {reply.stream_error}"
        error = {"message": message, "type": reply.stream_error, "code": None}
        if reply.error_field:  # llama.cpp's server: the error object alone, in a field of its own
            return [f"data: {_utf8(chunks[0])}\n\n", f"error: {_utf8(error)}\n\n"]
        chunks = [chunks[0], {"error": error}]
    done = ["data: [DONE]\n\n"] if reply.send_done else []
    return [*(f"data: {_utf8(chunk)}\n\n" for chunk in chunks), *done]


def openai_trickle(reply: FakeReply, model: str, served: int) -> str | None:
    if reply.trickle <= 0:
        return None
    piece = (reply.text or "and so on ")[: max(reply.piece, 1)]
    base = {"id": f"chatcmpl-fake{served}", "object": "chat.completion.chunk", "created": 0, "model": model}
    chunk = {**base, "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
    return f"data: {_utf8(chunk)}\n\n"


def _utf8(chunk: JSON) -> str:
    # Characters as they are, not \u escapes: llama.cpp's server and vLLM send UTF-8 so, and JSON
    # leaves U+2028 and U+0085 unescaped inside a string (a reader must not end a line there).
    return json.dumps(chunk, ensure_ascii=False)


def anthropic_sse(reply: FakeReply, model: str, served: int) -> list[str]:
    events = _anthropic_events(reply, model, served)
    if reply.trickle > 0:
        head = {"type": "text", "text": ""}
        events = [
            events[0],
            ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": head}),
        ]
    elif reply.cut_after is not None:
        end = next(n for n, (name, _) in enumerate(events) if name == "message_delta")
        events = events[:end][: reply.cut_after]
    if reply.stream_error:
        message = reply.error_message or f"fake {reply.stream_error}"
        error = {"type": "error", "error": {"type": reply.stream_error, "message": message}}
        events = [events[0], ("error", error)]
    return [_sse_event(name, data) for name, data in events]


def anthropic_trickle(reply: FakeReply) -> str | None:
    if reply.trickle <= 0:
        return None
    delta = {"type": "text_delta", "text": (reply.text or "and so on ")[: max(reply.piece, 1)]}
    return _sse_event("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})


def _sse_event(name: str, data: JSON) -> str:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n"


# --- OpenAI Chat Completions ------------------------------------------------------------------


def _openai_usage(reply: FakeReply) -> JSON:
    return {
        "prompt_tokens": reply.input_tokens,
        "completion_tokens": reply.output_tokens,
        "total_tokens": reply.input_tokens + reply.output_tokens,
        "prompt_tokens_details": {"cached_tokens": reply.cached_tokens},
    }


def _openai_call_id(call: FakeToolCall, served: int, position: int) -> str:
    return call.id or f"call_fake_{served}_{position}"


def _openai_chunks(reply: FakeReply, model: str, served: int, include_usage: bool) -> list[JSON]:
    base = {"id": f"chatcmpl-fake{served}", "object": "chat.completion.chunk", "created": 0, "model": model}

    def chunk(delta: JSON, finish_reason: str | None = None) -> JSON:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({reply.reasoning_field: piece}) for piece in pieces(reply.thinking, reply.piece)]
    chunks += [chunk({"content": piece}) for piece in pieces(reply.text, reply.piece)]
    for position, call in enumerate(reply.tool_calls):
        arguments = call.raw_arguments()
        head: JSON = {"index": position, "type": "function", "function": {"name": call.name, "arguments": ""}}
        if reply.tool_call_ids:
            head["id"] = _openai_call_id(call, served, position)
        if reply.whole_tool_calls:
            head["function"]["arguments"] = arguments
            chunks.append(chunk({"tool_calls": [head]}))
            continue
        chunks.append(chunk({"tool_calls": [head]}))
        chunks += [
            chunk({"tool_calls": [{"index": position, "function": {"arguments": piece}}]})
            for piece in pieces(arguments, reply.piece)
        ]
    chunks.append(chunk({}, _openai_finish(reply) if reply.send_finish else None))
    if include_usage and reply.usage:
        chunks.append({**base, "choices": [], "usage": _openai_usage(reply)})
    return chunks


def _openai_finish(reply: FakeReply) -> str:
    return "length" if reply.truncated else "tool_calls" if reply.tool_calls else "stop"


def openai_completion(reply: FakeReply, model: str, served: int) -> JSON:
    message: JSON = {"role": "assistant", "content": reply.text or None}
    if reply.thinking:
        message[reply.reasoning_field] = reply.thinking
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": _openai_call_id(call, served, position),
                "type": "function",
                "function": {"name": call.name, "arguments": call.raw_arguments()},
            }
            for position, call in enumerate(reply.tool_calls)
        ]
    completion: JSON = {
        "id": f"chatcmpl-fake{served}",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": _openai_finish(reply)}],
    }
    if reply.usage:
        completion["usage"] = _openai_usage(reply)
    return completion


_OPENAI_ERRORS: dict[int, tuple[str, str | None]] = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "unsupported_country_region_territory"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
}


def openai_embeddings(
    texts: Sequence[str], vectors: np.ndarray, model: str, *, reverse: bool = False
) -> JSON:
    """A ``/embeddings`` reply: one item per text with its ``index``; ``reverse`` lists them last
    first, as a server that answers out of order does."""
    data = [
        {"object": "embedding", "index": n, "embedding": [float(x) for x in vector]}
        for n, vector in enumerate(vectors)
    ]
    tokens = sum(len(text.split()) for text in texts)
    return {
        "object": "list",
        "data": data[::-1] if reverse else data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


def openai_error(reply: FakeReply, model: str) -> JSON:
    kind, code = _OPENAI_ERRORS.get(reply.status, ("server_error", None))
    default = {
        401: "Incorrect API key provided.",
        404: f"The model `{model}` does not exist or you do not have access to it.",
        429: "Rate limit reached for requests.",
    }.get(reply.status, f"The server had an error ({reply.status}) while processing your request.")
    return {"error": {"message": reply.error_message or default, "type": kind, "param": None, "code": code}}


_ANTHROPIC_ERRORS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def anthropic_error(reply: FakeReply, model: str) -> JSON:
    kind = _ANTHROPIC_ERRORS.get(reply.status, "api_error")
    default = {401: "invalid x-api-key", 404: f"model: {model}", 529: "Overloaded"}.get(
        reply.status, f"fake {kind} ({reply.status})"
    )
    return {"type": "error", "error": {"type": kind, "message": reply.error_message or default}}


def _anthropic_usage(reply: FakeReply, output_tokens: int) -> JSON:
    return {
        "input_tokens": reply.input_tokens,
        "output_tokens": output_tokens,
        "cache_read_input_tokens": reply.cached_tokens,
        "cache_creation_input_tokens": reply.cache_write_tokens,
    }


def _anthropic_blocks(reply: FakeReply, served: int) -> list[tuple[JSON, JSON, list[JSON]]]:
    """Each content block as (complete block, block at ``content_block_start``, its deltas)."""
    blocks: list[tuple[JSON, JSON, list[JSON]]] = []
    if reply.thinking:
        deltas = [{"type": "thinking_delta", "thinking": p} for p in pieces(reply.thinking, reply.piece)]
        if reply.signature:
            deltas.append({"type": "signature_delta", "signature": reply.signature})
        full = {"type": "thinking", "thinking": reply.thinking, "signature": reply.signature}
        blocks.append((full, {"type": "thinking", "thinking": "", "signature": ""}, deltas))
    if reply.redacted_thinking:
        redacted = {"type": "redacted_thinking", "data": reply.redacted_thinking}
        blocks.append((redacted, redacted, []))
    if reply.text:
        deltas = [{"type": "text_delta", "text": p} for p in pieces(reply.text, reply.piece)]
        blocks.append(({"type": "text", "text": reply.text}, {"type": "text", "text": ""}, deltas))
    for position, call in enumerate(reply.tool_calls):
        start = {"type": "tool_use", "id": call.id or f"toolu_fake_{served}_{position}", "name": call.name}
        fragments = pieces(call.raw_arguments(), reply.piece)
        deltas = [{"type": "input_json_delta", "partial_json": p} for p in fragments]
        blocks.append(({**start, "input": call.input_object()}, {**start, "input": {}}, deltas))
    return blocks


def _anthropic_events(reply: FakeReply, model: str, served: int) -> list[tuple[str, JSON]]:
    message = anthropic_message(reply, model, served)
    start = {**message, "content": [], "stop_reason": None}
    if reply.usage:
        start["usage"] = _anthropic_usage(reply, 1)
    events: list[tuple[str, JSON]] = [
        ("message_start", {"type": "message_start", "message": start}),
        ("ping", {"type": "ping"}),
    ]
    for index, (_, block, deltas) in enumerate(_anthropic_blocks(reply, served)):
        start_event = {"type": "content_block_start", "index": index, "content_block": block}
        events.append(("content_block_start", start_event))
        events.extend(
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
            for delta in deltas
        )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    stop = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    delta: JSON = {"type": "message_delta", "delta": stop}
    if reply.usage:
        delta["usage"] = {"output_tokens": reply.output_tokens}
    events.append(("message_delta", delta))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def anthropic_message(reply: FakeReply, model: str, served: int) -> JSON:
    stop = "max_tokens" if reply.truncated else "tool_use" if reply.tool_calls else "end_turn"
    message: JSON = {
        "id": f"msg_fake{served}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [full for full, _, _ in _anthropic_blocks(reply, served)],
        "stop_reason": stop,
        "stop_sequence": None,
    }
    if reply.usage:
        message["usage"] = _anthropic_usage(reply, reply.output_tokens)
    return message
