"""Raw-token JSONL workloads, the format of SGLang's cache oracle driver (shared/oracle/README.md).

One request per line: ``{"rid": str, "input_ids": [int], "output_ids": [int], "session": optional}``,
plus what the client sends, optional: ``max_new_tokens`` (int >= 1) and ``ignore_eos`` (bool), the
scheduler oracle's workload keys (shared/oracle/SCHEDULER.md), kept as the trace's client columns.
The content is the given tokens (outputs included, not made unique). Lines are served in file order
one at a time, so arrivals are NaN and the trace carries :class:`~traces.closed_loop.SequentialReplay`.
Parent = previous line of the same session.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from traces.buffers import IntBuffer
from traces.closed_loop import SequentialReplay
from traces.errors import TraceFormatError
from traces.jsonl import (
    check_int,
    check_max,
    get_field,
    iter_json_lines,
    locate_bad_int,
    opened,
    require_object,
)
from traces.readers.common import session_links
from traces.schema import TokenContent, Trace, add_client_columns, make_requests
from traces.source import TraceInput

MAX_TOKEN_ID = 2**31 - 1


def _ids(src: str, line: int, obj: dict, key: str, buf: IntBuffer) -> int:
    ids = get_field(src, line, obj, key)
    if not isinstance(ids, list) or not ids:
        raise TraceFormatError(src, line, key, "must be a non-empty list of integers")
    try:
        buf.extend(ids)
    except (TypeError, OverflowError):
        locate_bad_int(src, line, key, ids, minimum=0)
    if min(ids) < 0 or max(ids) > MAX_TOKEN_ID or any(type(x) is bool for x in ids):
        for k, x in enumerate(ids):
            check_int(src, line, f"{key}[{k}]", x, 0)
            if x > MAX_TOKEN_ID:
                raise TraceFormatError(src, line, f"{key}[{k}]", f"must be in [0, 2**31 - 1], got {x}")
    return len(ids)


def _session(src: str, line: int, obj: dict, first_of_type: dict[type, int]) -> str | None:
    """The session label; integer and string sessions may not mix in one file (is ``1`` the same
    session as ``"1"``? kvplan refuses to guess)."""
    session = obj.get("session")
    if session is None:
        return None
    if isinstance(session, bool) or not isinstance(session, (str, int)):
        raise TraceFormatError(src, line, "session", f"must be a string or an integer, got {session!r}")
    first_of_type.setdefault(type(session), line)
    if len(first_of_type) > 1:
        lines = {t.__name__: n for t, n in first_of_type.items()}
        raise TraceFormatError(
            src,
            line,
            "session",
            f"mixes integer and string sessions (first int at line {lines['int']}, first str at line "
            f'{lines["str"]}); use one type so that 1 and "1" are not confused',
        )
    return str(session)


def _client(src: str, line: int, obj: dict) -> tuple[int | None, bool | None]:
    """The optional ``max_new_tokens`` / ``ignore_eos`` of a line (None: not sent)."""
    max_new = obj.get("max_new_tokens")
    if max_new is not None:
        check_max(src, line, "max_new_tokens", check_int(src, line, "max_new_tokens", max_new, 1))
    ignore_eos = obj.get("ignore_eos")
    if ignore_eos is not None and not isinstance(ignore_eos, bool):
        raise TraceFormatError(src, line, "ignore_eos", f"must be true or false, got {ignore_eos!r}")
    return max_new, ignore_eos


def read_token_jsonl(path: TraceInput | str | Path, limit: int | None = None) -> Trace:
    """Read a raw-token JSONL workload (the first ``limit`` records) into a canonical trace."""
    with opened(path) as inp:
        return _read(inp, limit)


def _read(inp: TraceInput, limit: int | None) -> Trace:
    src = inp.name
    tokens = IntBuffer()
    in_len, out_len = IntBuffer(), IntBuffer()
    rids: list[str] = []
    sessions: list[str | None] = []
    seen: dict[str, int] = {}
    first_of_type: dict[type, int] = {}
    max_new: list[int | None] = []
    ignore_eos: list[bool | None] = []
    for line, obj in iter_json_lines(inp, limit):
        obj = require_object(src, line, obj)
        rid = get_field(src, line, obj, "rid")
        if not isinstance(rid, str) or not rid:
            raise TraceFormatError(src, line, "rid", "must be a non-empty string")
        if rid in seen:
            raise TraceFormatError(src, line, "rid", f"duplicate rid {rid!r} (first at line {seen[rid]})")
        seen[rid] = line
        in_len.append(_ids(src, line, obj, "input_ids", tokens))
        out_len.append(_ids(src, line, obj, "output_ids", tokens))
        rids.append(rid)
        sessions.append(_session(src, line, obj, first_of_type))
        m, e = _client(src, line, obj)
        max_new.append(m)
        ignore_eos.append(e)
    prompt_len, output_len = in_len.numpy(), out_len.numpy()
    n = len(rids)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(prompt_len + output_len, out=offsets[1:])
    sess = np.array(sessions, dtype=object)
    has = np.array([s is not None for s in sessions], dtype=bool)
    codes = np.full(n, -1, dtype=np.int64)
    if has.any():
        _, codes[has] = np.unique(sess[has].astype(str), return_inverse=True)
    parent, turn = session_links(codes)
    requests = make_requests(
        rids, np.full(n, np.nan), prompt_len, output_len, session_id=sessions, turn=turn, parent=parent
    )
    add_client_columns(requests, max_new, ignore_eos)
    return Trace(requests, TokenContent(offsets, tokens.numpy()), source=src, closed_loop=SequentialReplay())
