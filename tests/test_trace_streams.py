"""Inputs that can be read only once (stdin, pipes, FIFOs, gzip through a pipe) lose no record, and
``trace head`` reads no further than the rows it shows (issue 9, items 5 and 15)."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from simulator.cli.main import app
from traces import load_trace

SAMPLES = Path(__file__).resolve().parents[1] / "traces" / "data"
MOONCAKE = SAMPLES / "mooncake_arxiv_head800.jsonl"
KVPLAN = [sys.executable, "-m", "simulator.cli.main"]
ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def _twenty(tmp_path: Path) -> Path:
    p = tmp_path / "twenty.jsonl"
    p.write_text("".join(MOONCAKE.read_text().splitlines(keepends=True)[:20]))
    return p


def _stats_requests(cmd: str, tmp_path: Path) -> int:
    res = subprocess.run(cmd, shell=True, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)["requests"]


def _kvplan() -> str:
    return " ".join(KVPLAN)


def test_dev_stdin_redirect_reads_every_record(tmp_path):
    p = _twenty(tmp_path)
    assert _stats_requests(f"{_kvplan()} trace stats --json /dev/stdin < {p}", tmp_path) == 20


def test_pipe_to_dash_reads_every_record(tmp_path):
    p = _twenty(tmp_path)
    assert _stats_requests(f"cat {p} | {_kvplan()} trace stats --json -", tmp_path) == 20


def test_pipe_to_dev_stdin_reads_every_record(tmp_path):
    p = _twenty(tmp_path)
    assert _stats_requests(f"cat {p} | {_kvplan()} trace stats --json /dev/stdin", tmp_path) == 20


def test_gzip_through_a_pipe(tmp_path):
    p = _twenty(tmp_path)
    gz = tmp_path / "twenty.jsonl.gz"
    gz.write_bytes(gzip.compress(p.read_bytes()))
    assert _stats_requests(f"cat {gz} | {_kvplan()} trace stats --json -", tmp_path) == 20


def test_stdin_in_process_matches_the_file():
    data = MOONCAKE.read_bytes()
    res = runner.invoke(app, ["trace", "stats", "--json", "-"], input=data)
    assert res.exit_code == 0, res.output
    direct = runner.invoke(app, ["trace", "stats", "--json", str(MOONCAKE)])
    piped, want = json.loads(res.stdout), json.loads(direct.stdout)
    piped.pop("source"), want.pop("source")
    # the same content hashes alike; only the source named differs (stdin against the path)
    piped["provenance"].pop("trace_source")
    want["provenance"].pop("trace_source")
    assert piped == want


def _fifo_writer(fifo: Path, data: bytes, hold: threading.Event | None = None) -> threading.Thread:
    def write() -> None:
        with open(fifo, "wb") as fh:
            fh.write(data)
            fh.flush()
            if hold is not None:
                hold.wait(60)

    t = threading.Thread(target=write, daemon=True)
    t.start()
    return t


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_fifo_reads_every_record(tmp_path):
    fifo = tmp_path / "trace.fifo"
    os.mkfifo(fifo)
    writer = _fifo_writer(fifo, MOONCAKE.read_bytes())
    assert len(load_trace(fifo)) == 800
    writer.join(10)


def test_head_stops_before_garbage(tmp_path):
    lines = MOONCAKE.read_text().splitlines(keepends=True)[:3]
    p = tmp_path / "head.jsonl"
    p.write_bytes("".join(lines).encode() + b"\xff\xfe not json, not UTF-8 \x00\n" * 50)
    res = runner.invoke(app, ["trace", "head", "-n", "3", str(p)])
    assert res.exit_code == 0, res.output
    assert len(res.stdout.strip().splitlines()) == 4  # header + 3 rows
    res = runner.invoke(app, ["trace", "stats", str(p)])  # the whole file is still refused
    assert res.exit_code == 1 and f"{p}:4:" in res.output


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_head_returns_from_a_fifo_that_never_closes(tmp_path):
    fifo = tmp_path / "open.fifo"
    os.mkfifo(fifo)
    hold = threading.Event()
    lines = MOONCAKE.read_text().splitlines(keepends=True)[:3]
    writer = _fifo_writer(fifo, "".join(lines).encode(), hold)
    try:
        res = subprocess.run(
            [*KVPLAN, "trace", "head", "-n", "2", str(fifo)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        hold.set()
        writer.join(10)
    assert res.returncode == 0, res.stderr
    assert len(res.stdout.strip().splitlines()) == 3


@pytest.mark.parametrize(
    "rel",
    [
        "mooncake_arxiv_head800.jsonl",
        "azure_conv_head1000.csv",
        "tokens_multiturn.jsonl",
        "dynamo_pi_request_trace.jsonl.gz",
        "ragpulse",
    ],
)
def test_limit_reads_the_first_records(rel):
    t = load_trace(SAMPLES / rel, limit=5)
    assert 0 < len(t) <= 5
    assert t.requests["parent"].max() < 5
