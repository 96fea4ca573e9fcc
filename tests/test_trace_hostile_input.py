"""Issue 9, the trace side: undecodable, compressed, huge, empty, duplicated and ambiguous input is
refused with one line naming file, line and field, never a traceback; what is valid still reads."""

from __future__ import annotations

import bz2
import gzip
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from simulator.cli.main import app
from traces import TraceFormatError, load_trace, write_parquet

SAMPLES = Path(__file__).resolve().parents[1] / "traces" / "data"
runner = CliRunner()
MC = '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n'
AZ_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def _mc(line2: str) -> bytes:
    return (MC + line2 + "\n").encode()


def _dyn(rid: str = "r1", output: int = 3, hashes: list | None = None) -> str:
    req = {
        "request_id": rid,
        "request_received_ms": 1000,
        "output_tokens": output,
        "replay": {"trace_block_size": 16, "input_length": 20, "input_sequence_hashes": hashes or [11, 12]},
    }
    return json.dumps(
        {"event": {"schema": "dynamo.request.trace.v1", "event_type": "request_end", "request": req}}
    )


def _one_line_error(path: Path, *args: str) -> str:
    res = runner.invoke(app, ["trace", "stats", *args, str(path)])
    assert res.exit_code == 1, res.output
    assert "Traceback" not in res.output and res.exception is None or isinstance(res.exception, SystemExit)
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvplan: error: "), res.output
    return lines[0]


# name: (file name, bytes, extra args, expected substring of the one-line error)
BAD_FILES = {
    "non-UTF-8 byte": ("a.jsonl", MC.encode() + b'{"timestamp": "\xff"}\n', (), "a.jsonl:2: not UTF-8"),
    "NUL bytes": ("a.jsonl", MC.encode() + b"\x00\x01\x02\n", (), "a.jsonl:2: binary data"),
    "bz2": ("a.jsonl.bz2", bz2.compress(MC.encode()), (), "bz2-compressed"),
    "zstd": ("a.jsonl.zst", b"\x28\xb5\x2f\xfd" + b"\x00" * 20, (), "zstd-compressed"),
    "UTF-16": ("a.jsonl", MC.encode("utf-16"), (), "UTF-16"),
    "gzip with garbage": ("a.jsonl.gz", gzip.compress(MC.encode() * 3) + b"garbage!", (), "corrupt gzip"),
    "truncated gzip": ("a.jsonl.gz", gzip.compress(MC.encode() * 300)[:-30], (), "corrupt gzip"),
    "huge input_length": (
        "a.jsonl",
        _mc('{"timestamp": 1, "input_length": ' + "9" * 40 + ', "output_length": 5, "hash_ids": [1]}'),
        ("--format", "mooncake"),
        "a.jsonl:2: field 'input_length': must be <=",
    ),
    "2**31 input_length": (
        "a.jsonl",
        (
            b'{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1]}\n'
            b'{"timestamp": 1, "input_length": 2147483648, "output_length": 5, "hash_ids": [1, 2]}\n'
        ),
        ("--block-size", "1073741824"),
        "a.jsonl:2: field 'input_length': must be <= 1,073,741,824",
    ),
    "huge integer timestamp": (
        "a.jsonl",
        _mc('{"timestamp": ' + "9" * 400 + ', "input_length": 5, "output_length": 5, "hash_ids": [1]}'),
        (),
        "a.jsonl:2: field 'timestamp': must be a finite number",
    ),
    "huge float timestamp": (
        "a.jsonl",
        _mc('{"timestamp": 1e999, "input_length": 5, "output_length": 5, "hash_ids": [1]}'),
        (),
        "a.jsonl:2: field 'timestamp': must be a finite number",
    ),
    "huge CSV cell": (
        "a.csv",
        (AZ_HEADER + "2023-11-16 18:15:46.68,374,44\n2023-11-16 18:15:47,1" + "0" * 30 + ",5\n").encode(),
        (),
        "a.csv:3: field 'ContextTokens': must be <=",
    ),
    "zero output (mooncake)": (
        "a.jsonl",
        _mc('{"timestamp": 1, "input_length": 5, "output_length": 0, "hash_ids": [1]}'),
        (),
        "a.jsonl:2: field 'output_length': must be >= 1",
    ),
    "zero output (azure)": (
        "a.csv",
        (AZ_HEADER + "2023-11-16 18:15:46.68,374,44\n2023-11-16 18:15:47,12,0\n").encode(),
        (),
        "a.csv:3: field 'GeneratedTokens': must be >= 1",
    ),
    "zero output (dynamo)": (
        "a.jsonl",
        (_dyn() + "\n" + _dyn("r2", output=0) + "\n").encode(),
        (),
        "a.jsonl:2: field 'event.request.output_tokens': must be >= 1",
    ),
    "Azure NaT": (
        "a.csv",
        (AZ_HEADER + "2023-11-16 18:15:46.68,374,44\nNaT,12,5\n").encode(),
        (),
        "a.csv:3: field 'TIMESTAMP': not a date-time 'YYYY-MM-DD hh:mm:ss' in 1678-2261: 'NaT'",
    ),
    "Azure year out of the nanosecond range": (
        "a.csv",
        (AZ_HEADER + "2023-11-16 18:15:46.68,374,44\n99999-01-01 00:00:00,12,5\n").encode(),
        (),
        "a.csv:3: field 'TIMESTAMP': not a date-time",
    ),
    "Azure negative number": (
        "a.csv",
        (AZ_HEADER + "2023-11-16 18:15:46.68,374,44\n-5,12,5\n").encode(),
        (),
        "a.csv:3: field 'TIMESTAMP': not a date-time",
    ),
    "Azure mixed epoch and date-time": (
        "a.csv",
        (AZ_HEADER + "1700000000,374,44\n2023-11-16 18:15:47,12,5\n").encode(),
        (),
        "a.csv:3: field 'TIMESTAMP': mixes date-times and epoch numbers",
    ),
    "Azure epoch unit changes": (
        "a.csv",
        (AZ_HEADER + "1700000000,374,44\n1700000000500,12,5\n").encode(),
        (),
        "a.csv:3: field 'TIMESTAMP': epoch unit changes",
    ),
    "boolean hash id (mooncake)": (
        "a.jsonl",
        _mc('{"timestamp": 1, "input_length": 600, "output_length": 5, "hash_ids": [1, true]}'),
        (),
        "a.jsonl:2: field 'hash_ids[1]': must be an integer, got bool True",
    ),
    "boolean hash id (dynamo)": (
        "a.jsonl",
        (_dyn(hashes=[False, 12]) + "\n").encode(),
        (),
        "a.jsonl:1: field 'event.request.replay.input_sequence_hashes[0]': must be an integer, got bool",
    ),
    "duplicate dynamo request id": (
        "a.jsonl",
        (_dyn("x") + "\n" + _dyn("x") + "\n").encode(),
        (),
        "a.jsonl:2: field 'event.request.request_id': duplicate request id 'x' (first at line 1)",
    ),
    "token sessions 1 and '1'": (
        "a.jsonl",
        (
            b'{"rid": "a", "input_ids": [1, 2], "output_ids": [3], "session": 1}\n'
            b'{"rid": "b", "input_ids": [1, 2, 3, 4], "output_ids": [5], "session": "1"}\n'
        ),
        (),
        "a.jsonl:2: field 'session': mixes integer and string sessions",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_input_is_one_located_line(tmp_path, case):
    name, data, args, expected = BAD_FILES[case]
    p = tmp_path / name
    p.write_bytes(data)
    line = _one_line_error(p, *args)
    assert expected in line, line


def test_mooncake_format_on_a_parquet_file(tmp_path):
    p = write_parquet(load_trace(SAMPLES / "tokens_multiturn.jsonl"), tmp_path / "t.parquet")
    line = _one_line_error(p, "--format", "mooncake")
    assert "t.parquet: a parquet file, not mooncake" in line


def test_block_size_zero_and_huge_are_refused(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_bytes(_mc('{"timestamp": 1, "input_length": 5, "output_length": 5, "hash_ids": [1]}'))
    for bad in (0, 10**12):
        with pytest.raises(TraceFormatError, match="block_size"):
            load_trace(p, block_size=bad)
    res = runner.invoke(app, ["trace", "stats", "--block-size", "1000000000000", str(p)])
    assert res.exit_code == 2 and "Traceback" not in res.output


def test_ragpulse_duplicate_table_ids(tmp_path):
    import shutil

    d = tmp_path / "rp"
    shutil.copytree(SAMPLES / "ragpulse", d)
    table = d / "1_sys_prompt.jsonl"
    first = table.read_text().splitlines()[0]
    table.write_text(table.read_text() + first + "\n")
    n = len(table.read_text().splitlines())
    with pytest.raises(TraceFormatError, match="duplicate id") as err:
        load_trace(d)
    assert (err.value.path, err.value.line, err.value.field) == (str(table), n, "sys_prompt_id")


@pytest.mark.parametrize(
    "rel", ["mooncake_arxiv_head800.jsonl", "azure_conv_head1000.csv", "tokens_multiturn.jsonl"]
)
def test_a_utf8_bom_is_accepted(tmp_path, rel):
    src = SAMPLES / rel
    p = tmp_path / rel
    p.write_bytes(b"\xef\xbb\xbf" + src.read_bytes())
    want, got = load_trace(src), load_trace(p)
    assert got.requests.drop(columns="rid").equals(want.requests.drop(columns="rid"))
    gz = tmp_path / (rel + ".gz")
    gz.write_bytes(gzip.compress(p.read_bytes()))
    assert len(load_trace(gz)) == len(want)


@pytest.mark.parametrize(
    ("cells", "span"),
    [
        (("1700000000", "1700000010.5"), 10.5),  # seconds
        (("1700000000000", "1700000010500"), 10.5),  # milliseconds
        (("1700000000000000", "1700000010500000"), 10.5),  # microseconds
    ],
)
def test_azure_epoch_numbers_are_not_years(tmp_path, cells, span):
    p = tmp_path / "a.csv"
    p.write_text(AZ_HEADER + "".join(f"{c},10,5\n" for c in cells))
    t = load_trace(p)
    assert t.requests["arrival_s"].tolist() == pytest.approx([0.0, span])


def test_header_mismatch_shows_invisible_characters(tmp_path):
    p = tmp_path / "a.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\u200b\n2023-11-16 18:15:46.68,374,44\n")
    with pytest.raises(TraceFormatError, match=r"\\u200b"):
        load_trace(p, fmt="azure")
