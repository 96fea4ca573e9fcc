"""Dynamo request-trace events (``dynamo.request.trace.v1``, gzip or plain JSONL).

Only ``request_end`` events are requests; ``tool_start`` / ``tool_end`` / ``tool_error`` events
describe the agent harness and are counted, not read. Per request: arrival =
``request.request_received_ms`` (relative to the earliest), ``request.replay.input_length`` prompt
tokens, ``request.output_tokens``, 16-token chained sequence hashes
(``request.replay.input_sequence_hashes``, u64, last block partial) and the agent session
``agent_context.session_id``. The parent of a request is the previous request of its session; the
served ``request.cached_tokens`` is kept as column ``observed_cached_tokens``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from traces.buffers import FloatBuffer, IntBuffer
from traces.chains import chain_block_ids
from traces.continuation import ContinuationMode, link_and_build
from traces.errors import TraceFormatError
from traces.jsonl import (
    check_int,
    check_max,
    get_field,
    hash_id_list,
    int_field,
    iter_json_lines,
    length_field,
    locate_bad_int,
    opened,
    require_object,
)
from traces.readers.common import arrival_order, fixed_block_lens, reorder_csr, session_links
from traces.schema import Trace, make_requests
from traces.source import TraceInput

SCHEMA = "dynamo.request.trace.v1"
MAX_MS = 2**53  # timestamps above this lose integer precision as float64


def _sub(src: str, line: int, obj: dict, key: str, where: str) -> dict:
    value = get_field(src, line, obj, key, where)
    if not isinstance(value, dict):
        raise TraceFormatError(src, line, where, f"must be an object, got {type(value).__name__}")
    return value


def _block_hashes(src: str, line: int, replay: dict, n_in: int, bs: int, hashes: IntBuffer) -> list:
    """The request's chained block hashes (one per started block), appended to ``hashes``."""
    name = "event.request.replay.input_sequence_hashes"
    ids = hash_id_list(src, line, replay, "input_sequence_hashes", n_in, bs, name)
    try:
        hashes.extend(ids)
    except (TypeError, OverflowError):
        locate_bad_int(src, line, name, ids, minimum=0)
    return ids


def _identity(src: str, line: int, event: dict, req: dict) -> tuple[str, str | None, int]:
    """(request id, agent session or None, served cached tokens or -1) of one request."""
    rid = get_field(src, line, req, "request_id", "event.request.request_id")
    if not isinstance(rid, str) or not rid:
        raise TraceFormatError(src, line, "event.request.request_id", "must be a non-empty string")
    ctx = event.get("agent_context") or {}
    session = ctx.get("session_id") if isinstance(ctx, dict) else None
    if session is not None and not isinstance(session, str):
        raise TraceFormatError(src, line, "event.agent_context.session_id", "must be a string")
    c = req.get("cached_tokens")
    return rid, session, -1 if c is None else check_int(src, line, "event.request.cached_tokens", c, 0)


def read_dynamo_events(
    path: TraceInput | str | Path, continuation: ContinuationMode = "reuse-output", limit: int | None = None
) -> Trace:
    """Read a Dynamo request-trace event file (the first ``limit`` lines) into a canonical trace."""
    with opened(path) as inp:
        return _read(inp, continuation, limit)


def _read(inp: TraceInput, continuation: ContinuationMode, limit: int | None) -> Trace:
    src = inp.name
    received, in_len, out_len, cached, counts, hashes = (
        FloatBuffer(),
        IntBuffer(),
        IntBuffer(),
        IntBuffer(),
        IntBuffer(),
        IntBuffer("Q"),
    )
    rids: list[str] = []
    sessions: list[str | None] = []
    block_size: int | None = None
    first_line: dict[str, int] = {}
    for line, obj in iter_json_lines(inp, limit):
        event = _sub(src, line, require_object(src, line, obj), "event", "event")
        if event.get("schema") != SCHEMA:
            raise TraceFormatError(
                src, line, "event.schema", f"expected {SCHEMA!r}, got {event.get('schema')!r}"
            )
        if get_field(src, line, event, "event_type", "event.event_type") != "request_end":
            continue
        req = _sub(src, line, event, "request", "event.request")
        replay = _sub(src, line, req, "replay", "event.request.replay")
        bs = int_field(src, line, replay, "trace_block_size", 1, "event.request.replay.trace_block_size")
        check_max(src, line, "event.request.replay.trace_block_size", bs)
        if block_size is None:
            block_size = bs
        elif bs != block_size:
            raise TraceFormatError(
                src,
                line,
                "event.request.replay.trace_block_size",
                f"{bs} differs from the file's first block size {block_size}",
            )
        n_in = length_field(src, line, replay, "input_length", "event.request.replay.input_length")
        n_out = length_field(src, line, req, "output_tokens", "event.request.output_tokens")
        t = int_field(src, line, req, "request_received_ms", 0, "event.request.request_received_ms")
        check_max(src, line, "event.request.request_received_ms", t, MAX_MS)
        ids = _block_hashes(src, line, replay, n_in, bs, hashes)
        rid, session, c = _identity(src, line, event, req)
        if rid in first_line:
            raise TraceFormatError(
                src,
                line,
                "event.request.request_id",
                f"duplicate request id {rid!r} (first at line {first_line[rid]})",
            )
        first_line[rid] = line
        cached.append(c)
        received.append(t)
        in_len.append(n_in)
        out_len.append(n_out)
        counts.append(len(ids))
        rids.append(rid)
        sessions.append(session)
    if not rids:
        raise TraceFormatError(src, None, None, "no request_end events")
    return _assemble(
        src,
        received.numpy(),
        np.array(rids),
        np.array(sessions, dtype=object),
        in_len.numpy(),
        out_len.numpy(),
        cached.numpy(),
        counts.numpy(),
        hashes.numpy().view(np.int64),
        block_size or 16,
        continuation,
    )


def _assemble(
    src,
    received,
    rids,
    sessions,
    prompt_len,
    output_len,
    cached,
    counts,
    raw,
    block_size,
    continuation: ContinuationMode,
) -> Trace:
    arrival = (received - received.min()) / 1000.0
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    order = arrival_order(arrival, src)
    if order is not None:
        arrival, rids, sessions = arrival[order], rids[order], sessions[order]
        prompt_len, output_len, cached = prompt_len[order], output_len[order], cached[order]
        offsets, raw = reorder_csr(order, offsets, raw)
    has = np.array([s is not None for s in sessions], dtype=bool)
    codes = np.full(len(sessions), -1, dtype=np.int64)
    if has.any():
        _, codes[has] = np.unique(sessions[has].astype(str), return_inverse=True)
    parent, turn = session_links(codes)
    chains, n_chains = chain_block_ids(raw, offsets)
    lens = fixed_block_lens(np.diff(offsets), prompt_len, block_size)
    linked = link_and_build(
        offsets, chains, lens, n_chains, prompt_len, output_len, block_size, continuation, parent=parent
    )
    requests = make_requests(
        rids, arrival, prompt_len, output_len, session_id=list(sessions), turn=turn, parent=parent
    )
    requests["observed_cached_tokens"] = cached
    return Trace(requests, linked.content, source=src)
