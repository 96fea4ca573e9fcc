"""The chunked Mooncake and Azure readers (issue 14) read every input as the record-by-record
path does: the same trace, or the same error at the same line. Each input is read twice, once
as shipped and once with the plain-chunk fast path switched off, with small chunks so that chunk
boundaries fall inside the files."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

import traces.jsonl_chunks
import traces.readers.azure as azure
import traces.readers.azure_chunks
import traces.readers.mooncake as mooncake
from simulator.provenance import trace_hash
from traces import load_trace

CASES = Path(__file__).resolve().parent / "bad_input" / "cases"
DATA = Path(__file__).resolve().parents[1] / "traces" / "data"


def _outcome(path: Path, fmt: str | None = None, limit: int | None = None) -> tuple:
    try:
        trace = load_trace(path, fmt=fmt, limit=limit)
    except Exception as exc:  # noqa: BLE001 -- the outcome is the error itself
        return ("error", type(exc).__name__, str(exc))
    cols = [trace.column(c).tolist() for c in ("arrival_s", "turn", "parent", "prompt_len", "output_len")]
    return ("trace", trace_hash(trace), cols, trace.labels("rid"), trace.labels("session_id"))


def _both(
    monkeypatch: pytest.MonkeyPatch, path: Path, fmt: str | None = None, limit: int | None = None
) -> None:
    """Mooncake: also with plain lines scanned straight into arrays (traces/readers/mooncake_lines.py,
    the compiled build's path; a pure-Python run scans them with the same .py) and without."""
    monkeypatch.setattr(traces.jsonl_chunks, "CHUNK", 3)
    monkeypatch.setattr(traces.readers.azure_chunks, "CHUNK", 3)
    outcomes = []
    for scan in (True, False):
        monkeypatch.setattr(mooncake, "SCAN_LINES", scan)
        outcomes.append(_outcome(path, fmt, limit))
    with monkeypatch.context() as m:
        m.setattr(mooncake, "plain_chunk", lambda objs, block_size: None)
        m.setattr(azure, "plain_rows", lambda rows, units: None)
        slow = _outcome(path, fmt, limit)
    assert outcomes == [slow, slow]


CORPUS = sorted([*CASES.glob("mooncake-*.jsonl"), *CASES.glob("azure-*.csv")])


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_bad_input_corpus_reads_alike(monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
    fmt = "azure" if path.suffix == ".csv" else "mooncake"
    _both(monkeypatch, path, fmt)
    _both(monkeypatch, path, fmt, limit=2)


@pytest.mark.parametrize("name", ["mooncake_arxiv_head800.jsonl", "azure_conv_head1000.csv"])
def test_samples_read_alike(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    _both(monkeypatch, DATA / name)
    _both(monkeypatch, DATA / name, limit=10)


_MOONCAKE_MUTATIONS = [
    ("timestamp", True),
    ("timestamp", "12.5"),
    ("timestamp", 1e400),
    ("timestamp", 10**400),
    ("timestamp", None),
    ("input_length", 1.0),
    ("input_length", 0),
    ("input_length", 2**31),
    ("output_length", False),
    ("output_length", -3),
    ("hash_ids", [True]),
    ("hash_ids", [2**63]),
    ("hash_ids", [-(2**63)]),
    ("hash_ids", "x"),
    ("hash_ids", [1.0]),
    ("hash_ids", [1, 2]),
]


def _mooncake_line(rng: random.Random, ts: float) -> dict:
    n_in = rng.randint(1, 1500)
    return {
        "timestamp": ts,
        "input_length": n_in,
        "output_length": rng.randint(1, 50),
        "hash_ids": [rng.randint(0, 30) for _ in range(-(-n_in // 512))],
    }


@pytest.mark.parametrize("seed", range(40))
def test_mutated_mooncake_reads_alike(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, seed: int) -> None:
    """One or two bad records among good ones, with broken JSON or blank lines after them."""
    rng = random.Random(seed)
    records = [_mooncake_line(rng, t * 10 + rng.choice([0, 0.5])) for t in range(12)]
    lines = [json.dumps(r) for r in records]
    for _ in range(rng.randint(1, 2)):
        i = rng.randrange(len(records))
        key, value = rng.choice(_MOONCAKE_MUTATIONS)
        bad = dict(records[i])
        if value is None:
            del bad[key]
        else:
            bad[key] = value
        lines[i] = json.dumps(bad)
    if rng.random() < 0.5:
        lines.insert(rng.randrange(len(lines)), rng.choice(["{", '{"a": [1', "", "   ", "[1, 2]", "nan"]))
    if rng.random() < 0.3:
        lines[rng.randrange(len(lines))] += rng.choice([" ", "\t", "x", "\r"])
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n")
    _both(monkeypatch, path, "mooncake")


@pytest.mark.parametrize("seed", range(30))
def test_mutated_azure_reads_alike(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    rows = [
        f"2023-11-16 18:{m:02d}:{rng.randint(0, 59):02d}.{rng.randint(0, 9999999):07d},"
        f"{rng.randint(1, 9000)},{rng.randint(1, 900)}"
        for m in range(12)
    ]
    bad = [
        "2023-11-16 18:00:00+01:00,5,5",
        "2023-13-16 18:00:00,5,5",
        "2023-02-30 18:00:00,5,5",
        "1677-01-01 00:00:00,5,5",
        "1700000000,5,5",
        " 2023-11-16 18:00:00,5,5",
        "2023-11-16 18:00:00, 5,5",
        "2023-11-16 18:00:00,5.0,5",
        "2023-11-16 18:00:00,0,5",
        "2023-11-16 18:00:00,5,1_0",
        "2023-11-16 18:00:00,5",
        "2023-11-16 18:00:00.1234567891,5,5",
        "NaT,5,5",
        ",,",
        "",
        '"2023-11-16 18:00:00",5,5',
    ]
    for _ in range(rng.randint(1, 2)):
        rows[rng.randrange(len(rows))] = rng.choice(bad)
    path = tmp_path / "t.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows) + "\n")
    _both(monkeypatch, path, "azure")


def test_bad_record_before_bad_json_in_one_chunk(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The first bad line is reported even when a later line of its chunk is not JSON."""
    rng = random.Random(0)
    lines = [json.dumps(_mooncake_line(rng, t)) for t in range(6)]
    lines[1] = lines[1].replace('"input_length"', '"input_len"')
    lines[4] = "{not json"
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n")
    kind, _name, message = _outcome(path, "mooncake")
    assert kind == "error" and "input_length" in message and "JSON" not in message, message
    _both(monkeypatch, path, "mooncake")


def test_plain_chunks_take_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shipped samples are plain: reading them never falls back to record by record."""
    calls = []
    monkeypatch.setattr(mooncake, "_record", lambda *a: calls.append(a))
    monkeypatch.setattr(azure, "_row", lambda *a: calls.append(a))
    for name in ("mooncake_arxiv_head800.jsonl", "azure_conv_head1000.csv"):
        assert len(load_trace(DATA / name)) > 0
    assert calls == []
    assert np.isfinite(load_trace(DATA / "azure_conv_head1000.csv").column("arrival_s")).all()
