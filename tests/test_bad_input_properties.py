"""Issue 9: property tests that generate malformed records per format (hypothesis).

Each test writes a file of records whose fields are drawn from valid and invalid values, computes
independently which record is the first bad one and why, and asserts that the reader either
refuses the file with a :class:`TraceFormatError` naming the file, that line and that field, or
reads it correctly (every record, the right token totals). Anything else (another exception, a
silently dropped record) fails. ``kvplan trace stats`` then shows the same error as one line.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from simulator.cli.main import app
from traces import TraceFormatError, load_trace

MAX = 2**30
SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
MISSING = object()  # a field left out of the record

# A JSON value of any type, biased towards the edges of the integer fields.
ANY_JSON = st.one_of(
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, -1, MAX, MAX + 1, 2**31, 2**63, 2**64]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.text(alphabet="0123456789.-eE abcnaNIf", max_size=6),
    st.lists(st.integers(0, 9), max_size=2),
    st.just(MISSING),
)
GOOD_LEN = st.integers(1, 3000)


def _record(fields: dict) -> str:
    return json.dumps({k: v for k, v in fields.items() if v is not MISSING})


def _length_ok(v) -> bool:
    return type(v) is int and 1 <= v <= MAX


def _number_ok(v) -> bool:
    if v is MISSING or isinstance(v, bool) or not isinstance(v, (int, float, str)):
        return False
    try:
        return math.isfinite(float(v))
    except (ValueError, OverflowError):
        return False


def _check(path: Path, bad: tuple[int, str] | None, n: int, totals: tuple[int, int], fmt: str) -> None:
    """``bad`` = (line, field) of the first bad record, or None when the file is valid."""
    try:
        trace = load_trace(path, fmt=fmt)
    except TraceFormatError as exc:
        assert bad is not None, f"valid file refused: {exc}"
        assert exc.path == str(path) and exc.line == bad[0], (str(exc), bad)
        assert exc.field is not None and exc.field.startswith(bad[1]), (str(exc), bad)
        res = CliRunner().invoke(app, ["trace", "stats", "--format", fmt, str(path)])
        assert res.exit_code == 1 and res.stderr.strip() == f"kvplan: error: {exc}", res.output
        return
    assert bad is None, f"bad record at line {bad[0]} field {bad[1]} was accepted"
    req = trace.requests
    assert (len(req), int(req["prompt_len"].sum()), int(req["output_len"].sum())) == (n, *totals)


# --- Mooncake ------------------------------------------------------------------------------------
@st.composite
def mooncake_records(draw):
    ts = draw(st.one_of(st.integers(0, 10**6), st.floats(0, 1e6), ANY_JSON))
    n_in = draw(st.one_of(GOOD_LEN, GOOD_LEN, ANY_JSON))
    n_out = draw(st.one_of(GOOD_LEN, GOOD_LEN, ANY_JSON))
    want = -(-n_in // 512) if type(n_in) is int and 1 <= n_in <= 3000 else 2
    count = draw(st.one_of(st.just(want), st.integers(0, 8)))
    ids = draw(
        st.one_of(
            st.lists(st.integers(-(2**63), 2**63 - 1), min_size=count, max_size=count),
            st.lists(
                st.one_of(st.integers(-(2**65), 2**65), st.booleans(), st.none(), st.floats()),
                min_size=count,
                max_size=count,
            ),
            ANY_JSON,
        )
    )
    return {"timestamp": ts, "input_length": n_in, "output_length": n_out, "hash_ids": ids}


def _mooncake_bad(rec: dict) -> str | None:
    """The first field the reader must refuse (its order: timestamp, lengths, hash ids)."""
    if not _number_ok(rec["timestamp"]):
        return "timestamp"
    for key in ("input_length", "output_length"):
        if not _length_ok(rec[key]):
            return key
    ids = rec["hash_ids"]
    if not isinstance(ids, list) or len(ids) != -(-rec["input_length"] // 512):
        return "hash_ids"
    if any(type(x) is not int or not -(2**63) <= x < 2**63 for x in ids):
        return "hash_ids"
    return None


@SETTINGS
@given(st.lists(mooncake_records(), min_size=1, max_size=4))
def test_mooncake_records(tmp_path, records):
    path = tmp_path / "t.jsonl"
    path.write_text("".join(_record(r) + "\n" for r in records))
    bad = next(((i + 1, f) for i, r in enumerate(records) if (f := _mooncake_bad(r))), None)
    totals = (
        (sum(r["input_length"] for r in records), sum(r["output_length"] for r in records))
        if bad is None
        else (0, 0)
    )
    _check(path, bad, len(records), totals, "mooncake")


# --- raw-token JSONL ------------------------------------------------------------------------------
TOKEN_IDS = st.one_of(
    st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=6),
    st.lists(st.one_of(st.integers(-5, 2**64), st.booleans(), st.none(), st.text(max_size=1)), max_size=4),
    ANY_JSON,
)


@st.composite
def token_records(draw):
    return {
        "rid": draw(st.one_of(st.sampled_from(["a", "b", "c", "d"]), ANY_JSON)),
        "input_ids": draw(TOKEN_IDS),
        "output_ids": draw(TOKEN_IDS),
        "session": draw(st.one_of(st.just(MISSING), st.sampled_from(["s", "t", 1, 2]), ANY_JSON)),
    }


def _ids_ok(v) -> bool:
    return isinstance(v, list) and bool(v) and all(type(x) is int and 0 <= x < 2**31 for x in v)


def _tokens_first_bad(records: list[dict]) -> tuple[int, str] | None:
    seen, types = set(), set()
    for i, r in enumerate(records, 1):
        rid = r["rid"]
        if not isinstance(rid, str) or not rid or rid in seen:
            return i, "rid"
        seen.add(rid)
        for key in ("input_ids", "output_ids"):
            if not _ids_ok(r[key]):
                return i, key
        s = r["session"]
        if s is MISSING or s is None:
            continue
        if isinstance(s, bool) or not isinstance(s, (str, int)):
            return i, "session"
        types.add(type(s))
        if len(types) > 1:
            return i, "session"
    return None


@SETTINGS
@given(st.lists(token_records(), min_size=1, max_size=4))
def test_token_records(tmp_path, records):
    path = tmp_path / "t.jsonl"
    path.write_text("".join(_record(r) + "\n" for r in records))
    bad = _tokens_first_bad(records)
    totals = (
        (0, 0)
        if bad
        else (sum(len(r["input_ids"]) for r in records), sum(len(r["output_ids"]) for r in records))
    )
    _check(path, bad, len(records), totals, "tokens")


# --- Azure CSV ------------------------------------------------------------------------------------
CELL = st.one_of(
    st.integers(1, 5000).map(str),
    st.integers(-(2**40), 2**40).map(str),
    st.text(alphabet="0123456789-+. eEnaif", max_size=6),
)
TIMESTAMP = st.one_of(
    st.integers(0, 59).map(lambda s: f"2023-11-16 18:15:{s:02d}.5"),
    st.sampled_from(["NaT", "", "nan", "2023-13-01 00:00:00", "0001-01-01", "1700000000", "abc"]),
)


def _cell_ok(text: str) -> bool:
    try:
        return 1 <= int(text) <= MAX
    except ValueError:
        return False


@SETTINGS
@given(st.lists(st.tuples(TIMESTAMP, CELL, CELL), min_size=1, max_size=4))
def test_azure_rows(tmp_path, rows):
    path = tmp_path / "t.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(f"{t},{a},{b}\n" for t, a, b in rows)
    )
    bad, kinds, kept = None, set(), []
    for i, (t, a, b) in enumerate(rows, 2):
        if not (t.strip() or a.strip() or b.strip()):
            continue  # an empty row is not a record
        kinds.add("epoch" if t == "1700000000" else "date")
        if t not in ("1700000000",) and not t.startswith("2023-11-16") or len(kinds) > 1:
            bad = (i, "TIMESTAMP")
        elif not _cell_ok(a):
            bad = (i, "ContextTokens")
        elif not _cell_ok(b):
            bad = (i, "GeneratedTokens")
        if bad:
            break
        kept.append((a, b))
    if not kept and bad is None:
        return  # only empty rows: "empty trace" (the corpus has that case)
    totals = (0, 0) if bad else (sum(int(a) for a, _ in kept), sum(int(b) for _, b in kept))
    _check(path, bad, len(kept), totals, "azure")


# --- Dynamo events --------------------------------------------------------------------------------
@st.composite
def dynamo_events(draw):
    n_in = draw(st.one_of(GOOD_LEN, ANY_JSON))
    count = -(-n_in // 16) if type(n_in) is int and 1 <= n_in <= 3000 else 1
    replay = {
        "trace_block_size": draw(st.one_of(st.just(16), ANY_JSON)),
        "input_length": n_in,
        "input_sequence_hashes": draw(
            st.one_of(st.lists(st.integers(0, 2**64 - 1), min_size=count, max_size=count), ANY_JSON)
        ),
    }
    request = {
        "request_id": draw(st.one_of(st.sampled_from(["r1", "r2", "r3"]), ANY_JSON)),
        "request_received_ms": draw(st.one_of(st.integers(0, 10**9), ANY_JSON)),
        "output_tokens": draw(st.one_of(GOOD_LEN, ANY_JSON)),
        "replay": replay,
    }
    return {"event": {"schema": "dynamo.request.trace.v1", "event_type": "request_end", "request": request}}


def _dynamo_first_bad(events: list[dict]) -> tuple[int, str] | None:
    seen, first_bs = set(), None
    for i, e in enumerate(events, 1):
        req = e["event"]["request"]
        rep = req["replay"]
        R = "event.request."
        bs = rep["trace_block_size"]
        if type(bs) is not int or not 1 <= bs <= MAX or bs != (first_bs or bs):
            return i, R + "replay.trace_block_size"
        first_bs = bs
        if not _length_ok(rep["input_length"]):
            return i, R + "replay.input_length"
        if not _length_ok(req["output_tokens"]):
            return i, R + "output_tokens"
        t = req["request_received_ms"]
        if type(t) is not int or not 0 <= t <= 2**53:
            return i, R + "request_received_ms"
        ids = rep["input_sequence_hashes"]
        if not isinstance(ids, list) or len(ids) != -(-rep["input_length"] // bs):
            return i, R + "replay.input_sequence_hashes"
        if any(type(x) is not int or not 0 <= x < 2**64 for x in ids):
            return i, R + "replay.input_sequence_hashes"
        rid = req["request_id"]
        if not isinstance(rid, str) or not rid or rid in seen:
            return i, R + "request_id"
        seen.add(rid)
    return None


@SETTINGS
@given(st.lists(dynamo_events(), min_size=1, max_size=3))
def test_dynamo_events(tmp_path, events):
    path = tmp_path / "t.jsonl"
    path.write_text(
        "".join(
            json.dumps(
                {
                    **e,
                    "event": {
                        **e["event"],
                        "request": {k: v for k, v in e["event"]["request"].items() if v is not MISSING},
                    },
                },
                default=lambda o: None,
            )
            + "\n"
            for e in events
        )
    )
    events = json.loads("[" + ",".join(path.read_text().splitlines()) + "]")
    for e in events:  # what was written (MISSING fields dropped, replay's MISSING as null)
        e["event"]["request"].setdefault("request_id", MISSING)
        e["event"]["request"].setdefault("request_received_ms", MISSING)
        e["event"]["request"].setdefault("output_tokens", MISSING)
    bad = _dynamo_first_bad(events)
    reqs = [e["event"]["request"] for e in events]
    totals = (
        (0, 0)
        if bad
        else (sum(r["replay"]["input_length"] for r in reqs), sum(r["output_tokens"] for r in reqs))
    )
    _check(path, bad, len(events), totals, "dynamo-events")


# --- parquet --------------------------------------------------------------------------------------
INT_COLUMN = st.one_of(
    st.lists(st.integers(1, 50), min_size=3, max_size=3),
    st.lists(st.integers(-(2**40), 2**40), min_size=3, max_size=3),
)


@SETTINGS
@given(
    prompt=INT_COLUMN,
    output=INT_COLUMN,
    parent=st.lists(st.integers(-3, 4), min_size=3, max_size=3),
    turn=st.lists(st.integers(-2, 3), min_size=3, max_size=3),
)
def test_parquet_columns(tmp_path, prompt, output, parent, turn):
    n = 3
    lens = [max(p, 0) + max(o, 0) for p, o in zip(prompt, output, strict=True)]
    tokens = [list(range(k)) if k < 200 else [0] for k in lens]
    table = pa.table(
        {
            "rid": ["a", "b", "c"],
            "arrival_s": [0.0, 1.0, 2.0],
            "session_id": ["a", "a", "c"],
            "turn": pa.array(turn, pa.int32()),
            "parent": pa.array(parent, pa.int64()),
            "prompt_len": pa.array(prompt, pa.int64()),
            "output_len": pa.array(output, pa.int64()),
            "tokens": pa.array(tokens, pa.large_list(pa.int64())),
        }
    )
    meta = {b"kvplan.format_version": b"1", b"kvplan.content": b"tokens", b"kvplan.closed_loop": b"null"}
    path = tmp_path / "t.parquet"
    buf = io.BytesIO()
    pq.write_table(table.replace_schema_metadata(meta), buf)
    path.write_bytes(buf.getvalue())
    # The reader checks columns in this order, each for its first bad row.
    checks = [
        ("prompt_len", [p < 1 for p in prompt]),
        ("prompt_len", [p > MAX for p in prompt]),
        ("output_len", [o < 1 for o in output]),
        ("output_len", [o > MAX for o in output]),
        ("turn", [t < 0 for t in turn]),
        ("parent", [p < -1 for p in parent]),
        ("parent", [p >= i for i, p in enumerate(parent)]),
        ("tokens", [len(tokens[i]) != prompt[i] + output[i] for i in range(n)]),
    ]
    bad = next(((field, rows.index(True)) for field, rows in checks if any(rows)), None)
    try:
        trace = load_trace(path)
    except TraceFormatError as exc:
        assert bad is not None, f"valid file refused: {exc}"
        assert (exc.field, exc.row) == bad, (str(exc), bad)
        assert str(exc).startswith(f"{path} row {bad[1]}: field '{bad[0]}': ")
        return
    assert bad is None, f"bad {bad} accepted"
    assert int(trace.requests["prompt_len"].sum()) == sum(prompt)
    assert np.array_equal(trace.requests["parent"].to_numpy(), parent)


# --- RAGPulse -------------------------------------------------------------------------------------
RAG_TABLES = {
    "sys_prompt": ("1_sys_prompt.jsonl", "sys_prompt_id", {1: 64, 2: 32}),
    "passages_ids": ("2_passages.jsonl", "passage_id", {10: 100, 11: 50}),
    "history": ("3_history.jsonl", "history_id", {20: 8}),
    "web_search": ("5_web_search.jsonl", "web_search_id", {40: 16}),
    "user_input": ("4_user_input.jsonl", "user_input_id", {30: 5}),
}
SEGMENT = st.one_of(
    st.sampled_from([1, 2, 10, 11, 20, 30, 40]), st.integers(-3, 50), st.booleans(), st.none()
)


@st.composite
def ragpulse_records(draw):
    comps = {c: draw(st.one_of(st.lists(SEGMENT, max_size=3), ANY_JSON)) for c in RAG_TABLES}
    return {
        "timestamp": draw(st.one_of(st.integers(0, 100).map(str), ANY_JSON)),
        "input_length": draw(st.one_of(GOOD_LEN, ANY_JSON)),
        "output_length": draw(st.one_of(GOOD_LEN, ANY_JSON)),
        "hash_ids": comps,
        "session_id": draw(st.one_of(st.sampled_from(["s1", "s2"]), ANY_JSON)),
    }


def _ragpulse_bad(r: dict) -> str | None:
    if not _number_ok(r["timestamp"]):
        return "timestamp"
    for key in ("input_length", "output_length"):
        if not _length_ok(r[key]):
            return key
    for comp, (_, _, table) in RAG_TABLES.items():
        segs = r["hash_ids"][comp]
        if segs is MISSING or not isinstance(segs, list):
            return f"hash_ids.{comp}"
        if any(type(x) is not int or x not in table for x in segs):
            return f"hash_ids.{comp}["
    s = r["session_id"]
    return None if isinstance(s, str) and s else "session_id"


@SETTINGS
@given(st.lists(ragpulse_records(), min_size=1, max_size=3))
def test_ragpulse_records(tmp_path, records):
    for _, (fname, key, table) in RAG_TABLES.items():
        (tmp_path / fname).write_text(
            "".join(json.dumps({key: k, "token_length": n}) + "\n" for k, n in table.items())
        )
    for r in records:
        r["hash_ids"] = {c: v for c, v in r["hash_ids"].items() if v is not MISSING}
    path = tmp_path / "0_trace.jsonl"
    path.write_text("".join(_record(r) + "\n" for r in records))
    for r in records:
        r["hash_ids"] = {c: r["hash_ids"].get(c, MISSING) for c in RAG_TABLES}
    bad = next(((i + 1, f) for i, r in enumerate(records) if (f := _ragpulse_bad(r))), None)
    totals = (
        (0, 0) if bad else (sum(r["input_length"] for r in records), sum(r["output_length"] for r in records))
    )
    _check(path, bad, len(records), totals, "ragpulse")
