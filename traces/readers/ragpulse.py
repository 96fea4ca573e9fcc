"""RAGPulse: ``0_trace.jsonl`` plus the component tables ``1_sys_prompt.jsonl`` ... ``5_web_search.jsonl``.

Each request lists segment ids per component; a segment's token count comes from its table. The
prompt is assumed to be laid out in :data:`COMPONENT_ORDER` (system prompt, retrieved passages, chat
history, web search, user question), the usual RAG template; the release does not document it.
Segment ids are not prefix-chained, so blocks are re-keyed by (previous block, segment).

``input_length`` is always a little larger than the sum of the segment lengths (6 to 12 tokens in the
release: template tokens). That remainder becomes one unique block at the end of the prompt, so it
is never shared and never dropped. If the segments are longer than ``input_length``, the content is
cut to ``input_length`` from the end and a warning says how many records were cut.

The file is not sorted by time: rows are sorted stably by ``timestamp`` (seconds, given as strings)
with a warning. Sessions are explicit: turn = order within the session, parent = previous request.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from traces.buffers import FloatBuffer, IntBuffer
from traces.chains import chain_block_ids
from traces.continuation import build_sequences
from traces.errors import TraceFormatError, TraceWarning
from traces.jsonl import (
    check_int,
    get_field,
    int_field,
    iter_json_lines,
    length_field,
    number_field,
    opened,
    require_object,
)
from traces.readers.common import arrival_order, reorder_csr, session_links
from traces.schema import Trace, make_requests
from traces.source import TraceInput

#: (trace key, table file, id key in the table), in assumed prompt order.
COMPONENT_ORDER: tuple[tuple[str, str, str], ...] = (
    ("sys_prompt", "1_sys_prompt.jsonl", "sys_prompt_id"),
    ("passages_ids", "2_passages.jsonl", "passage_id"),
    ("history", "3_history.jsonl", "history_id"),
    ("web_search", "5_web_search.jsonl", "web_search_id"),
    ("user_input", "4_user_input.jsonl", "user_input_id"),
)
TRACE_FILE = "0_trace.jsonl"
_NS = 1 << 40  # component namespace stride for raw segment ids


def _load_table(path: Path, id_key: str) -> dict[int, int]:
    table: dict[int, int] = {}
    first_line: dict[int, int] = {}
    for line, obj in iter_json_lines(path):
        obj = require_object(str(path), line, obj)
        seg = int_field(str(path), line, obj, id_key, 0)
        if seg in table:
            raise TraceFormatError(
                str(path), line, id_key, f"duplicate id {seg} (first at line {first_line[seg]})"
            )
        first_line[seg] = line
        table[seg] = length_field(str(path), line, obj, "token_length")
    return table


def _load_tables(trace_path: Path) -> list[dict[int, int]]:
    tables = []
    for _, fname, id_key in COMPONENT_ORDER:
        tpath = trace_path.parent / fname
        if not tpath.exists():
            raise TraceFormatError(
                str(trace_path), None, None, f"RAGPulse component table {fname} not found beside the trace"
            )
        tables.append(_load_table(tpath, id_key))
    return tables


def _segments(src: str, line: int, obj: dict, tables: list[dict[int, int]]) -> tuple[list[int], list[int]]:
    """Namespaced segment ids and token counts of one record's prompt, in :data:`COMPONENT_ORDER`."""
    comps = get_field(src, line, obj, "hash_ids")
    if not isinstance(comps, dict):
        raise TraceFormatError(src, line, "hash_ids", f"must be an object, got {type(comps).__name__}")
    unknown = set(comps) - {c for c, _, _ in COMPONENT_ORDER}
    if unknown:
        raise TraceFormatError(src, line, "hash_ids", f"unknown component(s) {sorted(unknown)}")
    ids: list[int] = []
    lens: list[int] = []
    for k, ((comp, fname, _), table) in enumerate(zip(COMPONENT_ORDER, tables, strict=True)):
        segs = get_field(src, line, comps, comp, f"hash_ids.{comp}")
        if not isinstance(segs, list):
            raise TraceFormatError(src, line, f"hash_ids.{comp}", "must be a list of integers")
        for j, seg in enumerate(segs):
            check_int(src, line, f"hash_ids.{comp}[{j}]", seg, 0)
            if seg not in table:
                raise TraceFormatError(src, line, f"hash_ids.{comp}[{j}]", f"id {seg} is not in {fname}")
            ids.append(k * _NS + seg)
            lens.append(table[seg])
    return ids, lens


def _fit_to_input(ids: list[int], lens: list[int], n_in: int, unique_id: int) -> bool:
    """Make the segments sum to ``n_in``: one unique block for a remainder (template tokens, never
    shared), or a cut from the end when they are longer. Returns whether content was cut."""
    extra = n_in - sum(lens)
    if extra > 0:
        ids.append(unique_id)
        lens.append(extra)
    short = -extra
    while short > 0:
        take = min(lens[-1], short)
        lens[-1] -= take
        short -= take
        if lens[-1] == 0:
            lens.pop()
            ids.pop()
    return extra < 0


def read_ragpulse(path: TraceInput | str | Path, limit: int | None = None) -> Trace:
    """Read RAGPulse from its directory or its ``0_trace.jsonl`` (tables must sit beside it)."""
    if isinstance(path, TraceInput) and not path.regular:
        raise TraceFormatError(
            path.name, None, None, "a RAGPulse trace needs its tables beside it: pass the file or directory"
        )
    p = path.path if isinstance(path, TraceInput) else Path(path)
    trace_path = p / TRACE_FILE if p.is_dir() else p
    tables = _load_tables(trace_path)
    with opened(path if isinstance(path, TraceInput) else trace_path) as inp:
        return _read(inp, tables, limit)


def _read(inp: TraceInput, tables: list[dict[int, int]], limit: int | None) -> Trace:
    src = inp.name
    ts, lines, in_len, out_len = FloatBuffer(), IntBuffer(), IntBuffer(), IntBuffer()
    counts, seg_ids, seg_lens = IntBuffer(), IntBuffer(), IntBuffer()
    sessions: list[str] = []
    cut = 0
    first_cut = None
    for line, obj in iter_json_lines(inp, limit):
        obj = require_object(src, line, obj)
        t = number_field(src, line, obj, "timestamp")
        n_in = length_field(src, line, obj, "input_length")
        n_out = length_field(src, line, obj, "output_length")
        ids, lens = _segments(src, line, obj, tables)
        session = get_field(src, line, obj, "session_id")
        if not isinstance(session, str) or not session:
            raise TraceFormatError(src, line, "session_id", "must be a non-empty string")
        if _fit_to_input(ids, lens, n_in, -1 - len(lines)):
            cut += 1
            first_cut = first_cut or line
        ts.append(t)
        lines.append(line)
        in_len.append(n_in)
        out_len.append(n_out)
        counts.append(len(ids))
        seg_ids.extend(ids)
        seg_lens.extend(lens)
        sessions.append(session)
    if cut:
        warnings.warn(
            f"{src}: {cut} record(s) (first at line {first_cut}) have segments longer than "
            "input_length; their content was cut to input_length",
            TraceWarning,
            stacklevel=2,
        )
    return _assemble(
        src,
        ts.numpy(),
        lines.numpy(),
        np.array(sessions),
        in_len.numpy(),
        out_len.numpy(),
        counts.numpy(),
        seg_ids.numpy(),
        seg_lens.numpy(),
    )


def _assemble(src, arrival, lines, sessions, prompt_len, output_len, counts, raw, lens) -> Trace:
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    order = arrival_order(arrival, src)
    if order is not None:
        arrival, lines, sessions = arrival[order], lines[order], sessions[order]
        prompt_len, output_len = prompt_len[order], output_len[order]
        offsets, raw, lens = reorder_csr(order, offsets, raw, lens)
    _, codes = np.unique(sessions, return_inverse=True)
    parent, turn = session_links(codes.reshape(-1).astype(np.int64))
    chains, n_chains = chain_block_ids(raw, offsets)
    content = build_sequences(
        offsets,
        chains,
        lens.astype(np.int64),
        n_chains,
        prompt_len,
        output_len,
        parent,
        np.zeros(len(parent), dtype=bool),
    )
    requests = make_requests(
        lines,
        arrival,
        prompt_len,
        output_len,
        session_id=list(sessions),
        turn=turn,
        parent=parent,
    )
    return Trace(requests, content, source=src)
