"""Mooncake / Dynamo hash-id JSONL: ``timestamp`` (ms), ``input_length``, ``output_length``, ``hash_ids``.

``hash_ids`` are prefix-chained ids of ``block_size``-token blocks (512 in Mooncake's release); the
last block may be partial, so ``len(hash_ids) == ceil(input_length / block_size)`` is required.
Sessions are not in the file: continuations are inferred (see :mod:`traces.continuation`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from traces.buffers import FloatBuffer, IntBuffer
from traces.chains import chain_block_ids
from traces.continuation import ContinuationMode, link_and_build
from traces.errors import TraceFormatError
from traces.jsonl import get_field, int_field, iter_json_lines, locate_bad_int, number_field, require_object
from traces.readers.common import arrival_order, fixed_block_lens, reorder_csr, roots_and_depths
from traces.schema import Trace, int_labels, make_requests

DEFAULT_BLOCK_SIZE = 512


def read_mooncake(
    path: str | Path, block_size: int = DEFAULT_BLOCK_SIZE, continuation: ContinuationMode = "reuse-output"
) -> Trace:
    """Read a Mooncake-format JSONL trace (streaming) into a canonical trace."""
    src = str(path)
    if block_size < 1:
        raise ValueError(f"block size must be >= 1, got {block_size}")
    ts, lines = FloatBuffer(), IntBuffer()
    in_len, out_len, counts, hashes = IntBuffer(), IntBuffer(), IntBuffer(), IntBuffer()
    for line, obj in iter_json_lines(src):
        obj = require_object(src, line, obj)
        t = number_field(src, line, obj, "timestamp")
        n_in = int_field(src, line, obj, "input_length", minimum=1)
        n_out = int_field(src, line, obj, "output_length", minimum=0)
        ids = get_field(src, line, obj, "hash_ids")
        if not isinstance(ids, list):
            raise TraceFormatError(
                src, line, "hash_ids", f"must be a list of integers, got {type(ids).__name__}"
            )
        want = -(-n_in // block_size)
        if len(ids) != want:
            raise TraceFormatError(
                src,
                line,
                "hash_ids",
                f"has {len(ids)} ids but input_length {n_in} needs ceil({n_in}/{block_size}) = {want}",
            )
        try:
            hashes.extend(ids)
        except (TypeError, OverflowError):
            locate_bad_int(src, line, "hash_ids", ids, minimum=None)
        ts.append(t)
        lines.append(line)
        in_len.append(n_in)
        out_len.append(n_out)
        counts.append(len(ids))
    return _assemble(
        src,
        ts.numpy() / 1000.0,
        lines.numpy(),
        in_len.numpy(),
        out_len.numpy(),
        counts.numpy(),
        hashes.numpy(),
        block_size,
        continuation,
    )


def _assemble(
    src: str,
    arrival: np.ndarray,
    lines: np.ndarray,
    prompt_len: np.ndarray,
    output_len: np.ndarray,
    counts: np.ndarray,
    raw: np.ndarray,
    block_size: int,
    continuation: ContinuationMode,
) -> Trace:
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    order = arrival_order(arrival, src)
    if order is not None:
        arrival, lines, prompt_len, output_len = (
            arrival[order],
            lines[order],
            prompt_len[order],
            output_len[order],
        )
        offsets, raw = reorder_csr(order, offsets, raw)
    chains, n_chains = chain_block_ids(raw, offsets)
    del raw
    lens = fixed_block_lens(np.diff(offsets), prompt_len, block_size)
    linked = link_and_build(offsets, chains, lens, n_chains, prompt_len, output_len, block_size, continuation)
    rid = int_labels(lines)
    root, depth = roots_and_depths(linked.parent)
    requests = make_requests(
        rid,
        arrival,
        prompt_len,
        output_len,
        session_id=pc.take(rid, pa.array(root)),
        turn=depth,
        parent=linked.parent,
    )
    return Trace(requests, linked.content, source=src)
