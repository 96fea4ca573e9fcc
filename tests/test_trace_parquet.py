"""Parquet round trip of every content kind and of the closed-loop spec."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from traces import (
    BenchMultiturnArgs,
    TraceFormatError,
    generate_bench_multiturn,
    load_trace,
    read_parquet,
    write_parquet,
)

SAMPLES = Path(__file__).resolve().parents[1] / "traces" / "data"


def _same(a, b) -> None:
    pd.testing.assert_frame_equal(a.requests, b.requests)
    assert a.content.kind == b.content.kind
    for name in ("offsets", "chain_ids", "block_lens", "tokens"):
        if hasattr(a.content, name):
            assert np.array_equal(getattr(a.content, name), getattr(b.content, name))
    assert a.closed_loop == b.closed_loop and a.source == b.source


@pytest.mark.parametrize(
    "rel",
    [
        "mooncake_arxiv_head800.jsonl",
        "ragpulse",
        "tokens_multiturn.jsonl",
        "dynamo_pi_request_trace.jsonl.gz",
        "azure_conv_head1000.csv",
    ],
)
def test_round_trip_samples(tmp_path, rel):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = load_trace(SAMPLES / rel)
    out = write_parquet(t, tmp_path / "t.parquet")
    back = load_trace(out)
    _same(t, back)
    assert np.array_equal(t.sequence_pages(16)[1], back.sequence_pages(16)[1])
    assert [p.name for p in tmp_path.iterdir()] == ["t.parquet"]  # no temporary left behind


def test_round_trip_closed_loop(tmp_path):
    t = generate_bench_multiturn(
        BenchMultiturnArgs(num_clients=3, min_rounds=1, max_rounds=3, enable_round_barrier=True)
    )
    back = read_parquet(write_parquet(t, tmp_path / "b.parquet"))
    _same(t, back)
    assert back.closed_loop.sender_rng().random() == t.closed_loop.sender_rng().random()


def test_foreign_parquet_is_refused(tmp_path):
    p = tmp_path / "x.parquet"
    pd.DataFrame({"a": [1]}).to_parquet(p)
    with pytest.raises(TraceFormatError, match="not a kvplan trace"):
        load_trace(p)


# ---------------------------------------------------------------- the text readers' checks
def _tampered(tmp_path, kind: str, edit) -> Path:
    """A valid trace of ``kind`` written to parquet, then one column replaced by ``edit(table)``
    (a pyarrow table -> table), metadata kept: what a foreign tool or a hand edit could leave."""
    import pyarrow.parquet as pq

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        src = "tokens_multiturn.jsonl" if kind == "tokens" else "mooncake_arxiv_head800.jsonl"
        t = load_trace(SAMPLES / src).head(6)
    path = write_parquet(t, tmp_path / f"{kind}.parquet")
    table = pq.read_table(path)
    meta = table.schema.metadata
    table = edit(table)
    pq.write_table(table.replace_schema_metadata({**(table.schema.metadata or {}), **meta}), path)
    return path


def _set(table, name, values, type_=None):
    import pyarrow as pa

    i = table.column_names.index(name)
    return table.set_column(i, name, pa.array(values, type_ or table.schema.field(name).type))


def _column(table, name):
    return table.column(name).to_pylist()


def _bump(values, row, delta):
    values = list(values)
    values[row] += delta
    return values


BAD_PARQUET = {
    # name: (content kind, edit, field, row, message)
    "prompt longer than content": (
        "blocks",
        lambda t: _set(t, "prompt_len", _bump(_column(t, "prompt_len"), 2, 1)),
        "block_lens",
        2,
        "prompt_len \\+ output_len",
    ),
    "token content shorter": (
        "tokens",
        lambda t: _set(t, "output_len", _bump(_column(t, "output_len"), 1, 5)),
        "tokens",
        1,
        "prompt_len \\+ output_len",
    ),
    "parent after its row": (
        "blocks",
        lambda t: _set(t, "parent", [-1, 3, -1, -1, -1, -1]),
        "parent",
        1,
        "earlier row",
    ),
    "parent below -1": (
        "blocks",
        lambda t: _set(t, "parent", [-1, -1, -2, -1, -1, -1]),
        "parent",
        2,
        ">= -1",
    ),
    "negative output_len": (
        "blocks",
        lambda t: _set(t, "output_len", _bump(_column(t, "output_len"), 4, -(10**6))),
        "output_len",
        4,
        ">= 1",
    ),
    "zero prompt_len": ("blocks", lambda t: _set(t, "prompt_len", [0] * 6), "prompt_len", 0, ">= 1"),
    "missing prompt_len": (
        "blocks",
        lambda t: _set(t, "prompt_len", [5, None, 5, 5, 5, 5]),
        "prompt_len",
        1,
        "missing value",
    ),
    "NaN prompt_len": (
        "blocks",
        lambda t: _set(
            t, "prompt_len", [5.0, 5.0, float("nan"), 5.0, 5.0, 5.0], __import__("pyarrow").float64()
        ),
        "prompt_len",
        2,
        "missing value",
    ),
    "zero output_len": (
        "blocks",
        lambda t: _set(t, "output_len", [1, 1, 1, 0, 1, 1]),
        "output_len",
        3,
        ">= 1",
    ),
    "prompt_len over the maximum": (
        "blocks",
        lambda t: _set(t, "prompt_len", [5, 5, 5, 5, 2**31, 5]),
        "prompt_len",
        4,
        "must be <=",
    ),
    "float prompt_len over int64": (
        "blocks",
        lambda t: _set(t, "prompt_len", [5.0, 1e30, 5.0, 5.0, 5.0, 5.0], __import__("pyarrow").float64()),
        "prompt_len",
        1,
        "must be <=",
    ),
    "negative turn": ("tokens", lambda t: _set(t, "turn", [0, 0, 0, -1, 0, 0]), "turn", 3, ">= 0"),
    "duplicate rid": (
        "tokens",
        lambda t: _set(t, "rid", ["a", "b", "c", "a", "d", "e"]),
        "rid",
        3,
        "first at row 0",
    ),
    "empty rid": ("blocks", lambda t: _set(t, "rid", ["a", "b", "", "c", "d", "e"]), "rid", 2, "non-empty"),
    "infinite arrival": (
        "blocks",
        lambda t: _set(t, "arrival_s", [0.0, 1.0, float("inf"), 3.0, 4.0, 5.0]),
        "arrival_s",
        2,
        "finite",
    ),
    "negative chain id": (
        "blocks",
        lambda t: _set(
            t, "chain_ids", [[-5] + r[1:] if i == 3 else r for i, r in enumerate(_column(t, "chain_ids"))]
        ),
        "chain_ids",
        3,
        ">= 0",
    ),
    "token id out of range": (
        "tokens",
        lambda t: _set(
            t, "tokens", [[2**31] + r[1:] if i == 5 else r for i, r in enumerate(_column(t, "tokens"))]
        ),
        "tokens",
        5,
        "2147483647",
    ),
    "missing content list": (
        "tokens",
        lambda t: _set(t, "tokens", [None if i == 2 else r for i, r in enumerate(_column(t, "tokens"))]),
        "tokens",
        2,
        "missing list",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_PARQUET))
def test_parquet_runs_the_readers_checks(tmp_path, case):
    kind, edit, field, row, message = BAD_PARQUET[case]
    path = _tampered(tmp_path, kind, edit)
    with pytest.raises(TraceFormatError, match=message) as err:
        read_parquet(path)
    assert (err.value.field, err.value.row, err.value.path) == (field, row, str(path))
    assert f"{path} row {row}: field '{field}'" in str(err.value)


def test_parquet_refuses_an_unknown_format_version(tmp_path):
    import pyarrow.parquet as pq

    path = _tampered(tmp_path, "tokens", lambda t: t)
    table = pq.read_table(path)
    pq.write_table(
        table.replace_schema_metadata({**table.schema.metadata, b"kvplan.format_version": b"99"}), path
    )
    with pytest.raises(TraceFormatError, match="kvplan.format_version.*'99'"):
        read_parquet(path)


def test_parquet_refuses_an_empty_trace(tmp_path):
    path = _tampered(tmp_path, "blocks", lambda t: t.slice(0, 0))
    with pytest.raises(TraceFormatError, match="empty trace"):
        read_parquet(path)


def test_untampered_parquet_still_reads(tmp_path):
    for kind in ("blocks", "tokens"):
        assert len(read_parquet(_tampered(tmp_path, kind, lambda t: t))) == 6


@pytest.mark.parametrize("column", ["prompt_len", "output_len", "parent", "arrival_s"])
def test_parquet_text_columns_are_refused(tmp_path, column):
    import pyarrow as pa

    path = _tampered(
        tmp_path, "blocks", lambda t: _set(t, column, ["5", "x", "5", "5", "5", "5"], pa.string())
    )
    with pytest.raises(TraceFormatError, match=f"field '{column}': must be a numeric column"):
        read_parquet(path)


def test_parquet_huge_chain_ids_are_renumbered(tmp_path):
    """Equal ids stay equal, but arrays are no longer sized by a foreign file's huge ids."""
    plain = _tampered(tmp_path, "blocks", lambda t: t)
    want = read_parquet(plain)
    big = tmp_path / "big"
    big.mkdir()
    path = _tampered(
        big,
        "blocks",
        lambda t: _set(t, "chain_ids", [[c + 2**40 for c in r] for r in _column(t, "chain_ids")]),
    )
    got = read_parquet(path)
    assert int(got.content.chain_ids.max()) < len(got.content.chain_ids)
    assert np.array_equal(got.sequence_pages(16)[1], want.sequence_pages(16)[1])
