"""The canonical trace's client columns (format_version 2): each request's own
``max_new_tokens`` and ``ignore_eos``, read from token JSONL and parquet, written by ``trace
convert``, validated with file / line (row) / field, and served as a client would send them."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import simpy
from typer.testing import CliRunner

from simulator.cli.main import app
from simulator.engine.clients import requests_from_trace
from simulator.engine.config import SimConfig
from simulator.engine.request import SimRequest
from simulator.engine.server import ServerModel
from traces import TraceFormatError, load_trace, read_parquet, write_parquet

ROWS = [
    {"rid": "a", "input_ids": [1, 2, 3], "output_ids": [4, 5, 6, 7, 8, 9], "max_new_tokens": 3,
     "ignore_eos": False},
    {"rid": "b", "input_ids": [1, 2, 3, 9], "output_ids": [6]},
    {"rid": "c", "input_ids": [5], "output_ids": [7, 7], "ignore_eos": True},
]  # fmt: skip


def _write(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_token_jsonl_reads_the_client_columns(tmp_path):
    t = load_trace(_write(tmp_path / "w.jsonl", ROWS))
    req = t.requests
    assert str(req["max_new_tokens"].dtype) == "Int64" and str(req["ignore_eos"].dtype) == "boolean"
    assert req["max_new_tokens"].tolist() == [3, pd.NA, pd.NA]
    assert req["ignore_eos"].tolist() == [False, pd.NA, True]
    plain = load_trace(
        _write(tmp_path / "p.jsonl", [{k: r[k] for k in ("rid", "input_ids", "output_ids")} for r in ROWS])
    )
    assert "max_new_tokens" not in plain.requests and "ignore_eos" not in plain.requests


def test_parquet_round_trip_and_trace_convert_carry_them(tmp_path):
    src = _write(tmp_path / "w.jsonl", ROWS)
    t = load_trace(src)
    back = read_parquet(write_parquet(t, tmp_path / "t.parquet"))
    pd.testing.assert_frame_equal(t.requests, back.requests)
    assert pq.read_metadata(tmp_path / "t.parquet").metadata[b"kvplan.format_version"] == b"2"
    r = CliRunner().invoke(app, ["trace", "convert", src, "-o", str(tmp_path / "c.parquet")])
    assert r.exit_code == 0, r.output
    pd.testing.assert_frame_equal(t.requests, load_trace(tmp_path / "c.parquet").requests)


def test_format_version_1_still_reads(tmp_path):
    """A file kvplan wrote before the client columns (format 1) reads as before: no columns."""
    rows = [{k: r[k] for k in ("rid", "input_ids", "output_ids")} for r in ROWS]
    t = load_trace(_write(tmp_path / "w.jsonl", rows))
    path = write_parquet(t, tmp_path / "v1.parquet")
    table = pq.read_table(path)
    pq.write_table(
        table.replace_schema_metadata({**table.schema.metadata, b"kvplan.format_version": b"1"}), path
    )
    back = read_parquet(path)
    pd.testing.assert_frame_equal(t.requests, back.requests)
    assert "max_new_tokens" not in back.requests


@pytest.mark.parametrize(
    "over,field,problem",
    [
        ({"max_new_tokens": 0}, "max_new_tokens", "must be >= 1, got 0"),
        ({"max_new_tokens": 1.5}, "max_new_tokens", "must be an integer, got float"),
        ({"max_new_tokens": 2**31}, "max_new_tokens", "must be <= 1,073,741,824"),
        ({"ignore_eos": "false"}, "ignore_eos", "must be true or false, got 'false'"),
        ({"ignore_eos": 0}, "ignore_eos", "must be true or false, got 0"),
    ],
)
def test_jsonl_errors_name_file_line_and_field(tmp_path, over, field, problem):
    path = _write(tmp_path / "bad.jsonl", [ROWS[0], {**ROWS[1], **over}])
    with pytest.raises(TraceFormatError) as exc:
        load_trace(path)
    assert str(exc.value).startswith(f"{path}:2: field '{field}': {problem}")


def test_parquet_errors_name_file_row_and_field(tmp_path):
    t = load_trace(_write(tmp_path / "w.jsonl", ROWS))
    path = write_parquet(t, tmp_path / "t.parquet")
    table = pq.read_table(path)
    i = table.column_names.index("max_new_tokens")
    pq.write_table(table.set_column(i, "max_new_tokens", pa_int([3, None, -2])), path)
    with pytest.raises(TraceFormatError) as exc:
        read_parquet(path)
    assert str(exc.value) == f"{path} row 2: field 'max_new_tokens': must be >= 1, got -2"


def pa_int(values):
    import pyarrow as pa

    return pa.array(values, pa.int64())


def _served(rows, tmp_path, **cfg) -> dict[str, SimRequest]:
    """Serve the trace one request at a time on a unit clock; each request's finish time."""
    from tests.test_usage_sampling import POOLS, _UnitCost

    trace = load_trace(_write(tmp_path / "w.jsonl", rows))
    reqs = requests_from_trace(trace, 1)
    env = simpy.Environment()
    server = ServerModel(env, SimConfig(disable_overlap_schedule=True, **cfg), POOLS, _UnitCost())

    def client():
        for r in reqs:
            r.arrival_s = env.now
            yield server.submit(r)

    env.process(client())
    env.run()
    return {r.rid: r for r in reqs}


def test_max_new_tokens_trace_uses_a_requests_own_value(tmp_path):
    """a: 6 output tokens in the trace but max_new_tokens 3: it finishes by length after 1 prefill
    + 2 decodes (3 time units); with --max-new-tokens 5, the client value, after 5."""
    own = _served(ROWS, tmp_path)
    assert own["a"].latency == 3.0 and own["b"].latency == 1.0 and own["c"].latency == 2.0
    fixed = _served(ROWS, tmp_path, max_new_tokens="5")
    assert fixed["a"].latency == 5.0


def test_a_requests_own_ignore_eos_overrides_the_flag(tmp_path):
    trace = load_trace(_write(tmp_path / "w.jsonl", ROWS))
    reqs = requests_from_trace(trace, 1)
    assert [(r.max_new_tokens, r.ignore_eos, r.eos_stated) for r in reqs] == [
        (3, False, True),
        (None, False, False),  # a token trace's default: stops at EOS
        (None, True, True),
    ]
    from tests.test_usage_sampling import POOLS, _UnitCost

    for flag, want in (
        (True, [False, True, True]),
        (False, [False, False, True]),
        (None, [False, False, True]),
    ):
        server = ServerModel(simpy.Environment(), SimConfig(ignore_eos=flag), POOLS, _UnitCost())
        for r in requests_from_trace(trace, 1):
            server.submit(r)
        assert [r.ignore_eos for r in server.waiting] == want, flag
    assert np.array_equal(trace.requests["prompt_len"].to_numpy(), [3, 4, 1])


def test_ignore_eos_runs_on_to_max_new_tokens(tmp_path):
    """A request sending ignore_eos with max_new_tokens above its output decodes on to
    max_new_tokens, as SGLang does (its extra pages are its own); one without ignore_eos stops at
    its output (EOS). d: 1 output token, max_new_tokens 4: 1 prefill + 3 decodes."""
    rows = [
        {"rid": "d", "input_ids": [8, 9], "output_ids": [1], "max_new_tokens": 4, "ignore_eos": True},
        {"rid": "e", "input_ids": [8, 9, 3], "output_ids": [1], "max_new_tokens": 4, "ignore_eos": False},
    ]
    got = _served(rows, tmp_path, check_invariants=True)
    assert (got["d"].latency, got["d"].output_len) == (4.0, 4)
    assert (got["e"].latency, got["e"].output_len) == (1.0, 1)
    fixed = _served(ROWS, tmp_path, max_new_tokens="5", check_invariants=True)
    assert (fixed["c"].latency, fixed["c"].output_len) == (5.0, 5)  # c sends ignore_eos
    assert (fixed["b"].latency, fixed["b"].output_len) == (1.0, 1)  # b stops at EOS
