"""Malformed input: every reader names file, line and field, and never drops a record silently."""

from __future__ import annotations

import gzip
import json
import warnings
from pathlib import Path

import pytest

from traces import TraceFormatError, TraceWarning, load_trace

GOOD_MC = '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}'


def _mc(line2: str) -> str:
    return GOOD_MC + "\n" + line2 + "\n"


MOONCAKE_CASES = [
    ("invalid_json", _mc('{"timestamp": 1, "input_length": 10,'), 2, None, "invalid JSON"),
    ("not_object", _mc("[1, 2]"), 2, None, "expected a JSON object"),
    (
        "missing_input",
        _mc('{"timestamp": 1, "output_length": 5, "hash_ids": [1]}'),
        2,
        "input_length",
        "missing",
    ),
    (
        "missing_hash_ids",
        _mc('{"timestamp": 1, "input_length": 5, "output_length": 5}'),
        2,
        "hash_ids",
        "missing",
    ),
    (
        "missing_timestamp",
        _mc('{"input_length": 5, "output_length": 5, "hash_ids": [1]}'),
        2,
        "timestamp",
        "missing",
    ),
    (
        "negative_output",
        _mc('{"timestamp": 1, "input_length": 5, "output_length": -1, "hash_ids": [1]}'),
        2,
        "output_length",
        ">= 1",
    ),
    (
        "zero_input",
        _mc('{"timestamp": 1, "input_length": 0, "output_length": 1, "hash_ids": []}'),
        2,
        "input_length",
        ">= 1",
    ),
    (
        "float_length",
        _mc('{"timestamp": 1, "input_length": 5.5, "output_length": 1, "hash_ids": [1]}'),
        2,
        "input_length",
        "integer",
    ),
    (
        "string_length",
        _mc('{"timestamp": 1, "input_length": "5", "output_length": 1, "hash_ids": [1]}'),
        2,
        "input_length",
        "integer",
    ),
    (
        "bool_length",
        _mc('{"timestamp": 1, "input_length": true, "output_length": 1, "hash_ids": [1]}'),
        2,
        "input_length",
        "integer",
    ),
    (
        "hash_count",
        _mc('{"timestamp": 1, "input_length": 600, "output_length": 1, "hash_ids": [1]}'),
        2,
        "hash_ids",
        "ceil(600/512) = 2",
    ),
    (
        "hash_type",
        _mc('{"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": "1"}'),
        2,
        "hash_ids",
        "list",
    ),
    (
        "hash_element",
        _mc('{"timestamp": 1, "input_length": 600, "output_length": 1, "hash_ids": [1, "x"]}'),
        2,
        "hash_ids[1]",
        "integer",
    ),
    (
        "bad_timestamp",
        _mc('{"timestamp": "soon", "input_length": 5, "output_length": 1, "hash_ids": [1]}'),
        2,
        "timestamp",
        "number",
    ),
    ("empty_file", "", None, None, "empty"),
    ("blank_lines_only", "\n\n  \n", None, None, "empty"),
]


@pytest.mark.parametrize(
    ("case", "text", "line", "field", "problem"), MOONCAKE_CASES, ids=[c[0] for c in MOONCAKE_CASES]
)
def test_mooncake_bad_input(tmp_path, case, text, line, field, problem):
    p = tmp_path / "bad.jsonl"
    p.write_text(text)
    with pytest.raises(TraceFormatError) as err:
        load_trace(p, fmt="mooncake")
    e = err.value
    assert (e.path, e.line, e.field) == (str(p), line, field)
    assert problem in e.problem
    assert str(p) in str(e)


def test_blank_lines_are_not_records(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text("\n" + GOOD_MC + "\n\n" + GOOD_MC + "\n\n")
    t = load_trace(p)
    assert len(t) == 2 and list(t.requests["rid"]) == ["2", "4"]  # rid = line number


def test_unsorted_timestamps_are_sorted_with_a_warning(tmp_path):
    p = tmp_path / "t.jsonl"
    rows = [
        {"timestamp": ts, "input_length": 5, "output_length": 1, "hash_ids": [i]}
        for i, ts in enumerate([5, 1, 3, 1])
    ]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.warns(TraceWarning, match=str(p)):
        t = load_trace(p)
    assert list(t.requests["rid"]) == ["2", "4", "3", "1"]  # stable for the tie at t = 1 ms
    assert list(t.requests["arrival_s"]) == [0.001, 0.001, 0.003, 0.005]


# --- RAGPulse --------------------------------------------------------------------------------------


def _ragpulse_dir(tmp_path: Path, trace_lines: list[str]) -> Path:
    tables = {
        "1_sys_prompt.jsonl": ("sys_prompt_id", {1: 512}),
        "2_passages.jsonl": ("passage_id", {2: 100, 3: 50}),
        "3_history.jsonl": ("history_id", {4: 11}),
        "4_user_input.jsonl": ("user_input_id", {5: 9}),
        "5_web_search.jsonl": ("web_search_id", {6: 512}),
    }
    for name, (key, rows) in tables.items():
        (tmp_path / name).write_text(
            "".join(json.dumps({key: k, "token_length": v}) + "\n" for k, v in rows.items())
        )
    (tmp_path / "0_trace.jsonl").write_text("".join(x + "\n" for x in trace_lines))
    return tmp_path


def _rp(ts="1", n_in=700, passages="[2, 3]", extra=""):
    return (
        f'{{"timestamp": "{ts}", "input_length": {n_in}, "output_length": 3, '
        f'"hash_ids": {{"sys_prompt": [1], "passages_ids": {passages}, "history": [4], '
        f'"web_search": [], "user_input": [5]{extra}}}, '
        '"session_id": "s1"}'
    )


@pytest.mark.parametrize(
    ("line2", "field", "problem"),
    [
        (_rp(passages="[2, 99]"), "hash_ids.passages_ids[1]", "not in 2_passages.jsonl"),
        (_rp(passages='["2"]'), "hash_ids.passages_ids[0]", "integer"),
        (_rp(passages="7"), "hash_ids.passages_ids", "list"),
        (_rp(ts="noon"), "timestamp", "number"),
        (_rp(extra=', "images": []'), "hash_ids", "unknown component"),
        (_rp().replace('"history": [4], ', ""), "hash_ids.history", "missing"),
        (_rp().replace('"session_id": "s1"', '"session_id": 7'), "session_id", "string"),
        (_rp(n_in=-3), "input_length", ">= 1"),
    ],
)
def test_ragpulse_bad_input(tmp_path, line2, field, problem):
    d = _ragpulse_dir(tmp_path, [_rp(), line2])
    with pytest.raises(TraceFormatError) as err:
        load_trace(d)
    assert (err.value.line, err.value.field) == (2, field)
    assert problem in err.value.problem


def test_ragpulse_missing_table(tmp_path):
    d = _ragpulse_dir(tmp_path, [_rp()])
    (d / "3_history.jsonl").unlink()
    with pytest.raises(TraceFormatError, match="3_history.jsonl"):
        load_trace(d)


def test_ragpulse_overlong_segments_are_cut_with_a_warning(tmp_path):
    d = _ragpulse_dir(tmp_path, [_rp(), _rp(ts="2", n_in=600)])  # segments sum to 682
    with pytest.warns(TraceWarning, match="first at line 2"):
        t = load_trace(d)
    assert list(t.requests["prompt_len"]) == [700, 600]
    assert t.content.seq_lens()[1] == 603


# --- Azure -----------------------------------------------------------------------------------------

HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
GOOD_AZ = "2023-11-16 18:15:46.6805900,374,44\n"


@pytest.mark.parametrize(
    ("text", "line", "field", "problem"),
    [
        ("", None, None, "empty"),
        (HEADER, None, None, "empty"),
        ("time,in,out\n" + GOOD_AZ, 1, None, "expected header"),
        (HEADER + GOOD_AZ + "2023-11-16 18:15:47,12.5,3\n", 3, "ContextTokens", "integer"),
        (HEADER + GOOD_AZ + "2023-11-16 18:15:47,12,-3\n", 3, "GeneratedTokens", ">= 1"),
        (HEADER + GOOD_AZ + "yesterday,12,3\n", 3, "TIMESTAMP", "date-time"),
        (HEADER + GOOD_AZ + "2023-11-16 18:15:47,12\n", 3, None, "3 columns"),
    ],
)
def test_azure_bad_input(tmp_path, text, line, field, problem):
    p = tmp_path / "a.csv"
    p.write_text(text)
    with pytest.raises(TraceFormatError) as err:
        load_trace(p, fmt="azure")
    assert (err.value.line, err.value.field) == (line, field)
    assert problem in err.value.problem


# --- Dynamo events ---------------------------------------------------------------------------------


def _event(**replay_over) -> dict:
    replay = {"trace_block_size": 16, "input_length": 20, "input_sequence_hashes": [11, 12]} | replay_over
    return {
        "timestamp": 1,
        "event": {
            "schema": "dynamo.request.trace.v1",
            "event_type": "request_end",
            "agent_context": {"session_id": "s"},
            "request": {
                "request_id": "r1",
                "output_tokens": 3,
                "request_received_ms": 1000,
                "cached_tokens": 0,
                "replay": replay,
            },
        },
    }


@pytest.mark.parametrize(
    ("event", "field", "problem"),
    [
        (_event(input_sequence_hashes=[11]), "event.request.replay.input_sequence_hashes", "ceil(20/16) = 2"),
        (_event(input_sequence_hashes=[11, -1]), "event.request.replay.input_sequence_hashes[1]", ">= 0"),
        (_event(input_length="20"), "event.request.replay.input_length", "integer"),
        (_event(trace_block_size=32), "event.request.replay.trace_block_size", "differs"),
        (
            {"timestamp": 1, "event": {"schema": "other.v2", "event_type": "request_end"}},
            "event.schema",
            "expected",
        ),
        ({"timestamp": 1}, "event", "missing"),
    ],
)
def test_dynamo_bad_input(tmp_path, event, field, problem):
    p = tmp_path / "d.jsonl.gz"
    with gzip.open(p, "wt") as fh:
        fh.write(json.dumps(_event()) + "\n" + json.dumps(event) + "\n")
    with pytest.raises(TraceFormatError) as err:
        load_trace(p, fmt="dynamo-events")
    assert (err.value.line, err.value.field) == (2, field)
    assert problem in err.value.problem


def test_dynamo_without_requests(tmp_path):
    p = tmp_path / "d.jsonl"
    ev = _event()
    ev["event"]["event_type"] = "tool_start"
    p.write_text(json.dumps(ev) + "\n")
    with pytest.raises(TraceFormatError, match="no request_end"):
        load_trace(p)


# --- raw-token JSONL -------------------------------------------------------------------------------

GOOD_TOK = '{"rid": "a", "input_ids": [1, 2, 3], "output_ids": [4]}'


@pytest.mark.parametrize(
    ("line2", "field", "problem"),
    [
        ('{"input_ids": [1], "output_ids": [2]}', "rid", "missing"),
        ('{"rid": "a", "input_ids": [1], "output_ids": [2]}', "rid", "duplicate"),
        ('{"rid": "b", "input_ids": [], "output_ids": [2]}', "input_ids", "non-empty"),
        ('{"rid": "b", "input_ids": [1, "2"], "output_ids": [2]}', "input_ids[1]", "integer"),
        ('{"rid": "b", "input_ids": [1, -2], "output_ids": [2]}', "input_ids[1]", ">= 0"),
        ('{"rid": "b", "input_ids": [1, 2.0], "output_ids": [2]}', "input_ids[1]", "integer"),
        ('{"rid": "b", "input_ids": [1], "output_ids": [4294967296]}', "output_ids[0]", "2**31 - 1"),
        ('{"rid": "b", "input_ids": [1], "output_ids": [2], "session": [1]}', "session", "string"),
    ],
)
def test_token_jsonl_bad_input(tmp_path, line2, field, problem):
    p = tmp_path / "w.jsonl"
    p.write_text(GOOD_TOK + "\n" + line2 + "\n")
    with pytest.raises(TraceFormatError) as err:
        load_trace(p, fmt="tokens")
    assert (err.value.line, err.value.field) == (2, field)
    assert problem in err.value.problem


def test_unknown_format_is_a_located_error(tmp_path):
    p = tmp_path / "x.txt"
    p.write_text("hello\n")
    with pytest.raises(TraceFormatError, match="unknown trace format"):
        load_trace(p)


def test_no_warning_for_clean_files(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text(GOOD_MC + "\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_trace(p)
