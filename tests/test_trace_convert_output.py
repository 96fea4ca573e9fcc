"""``kvplan trace convert -o``: never over its input, never through a link or onto a device, FIFO or
directory, written by rename, with the mode the umask gives (issue 9, item 2)."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from simulator.cli.main import app
from traces import load_trace

SAMPLES = Path(__file__).resolve().parents[1] / "traces" / "data"
runner = CliRunner()


def _copy(tmp_path: Path) -> Path:
    p = tmp_path / "in.jsonl"
    shutil.copy(SAMPLES / "tokens_multiturn.jsonl", p)
    return p


def _convert(src: Path, out: Path | str) -> tuple[int, str]:
    res = runner.invoke(app, ["trace", "convert", str(src), "-o", str(out)])
    return res.exit_code, res.output


def test_output_equal_to_the_input_is_refused(tmp_path):
    src = _copy(tmp_path)
    before = src.read_bytes()
    code, out = _convert(src, src)
    assert code == 1 and "is the input trace" in out
    assert src.read_bytes() == before


def test_output_through_a_symlink_to_the_input_is_refused(tmp_path):
    src = _copy(tmp_path)
    before = src.read_bytes()
    link = tmp_path / "link.parquet"
    link.symlink_to(src)
    code, out = _convert(src, link)
    assert code == 1 and "symbolic link" in out
    assert src.read_bytes() == before and link.is_symlink()


def test_input_through_a_symlink_and_hard_link_are_caught(tmp_path):
    src = _copy(tmp_path)
    before = src.read_bytes()
    link = tmp_path / "via.jsonl"
    link.symlink_to(src)
    hard = tmp_path / "hard.jsonl"
    os.link(src, hard)
    code, out = _convert(link, hard)
    assert code == 1 and "is the input trace" in out
    assert src.read_bytes() == before


def test_ragpulse_table_is_not_overwritten(tmp_path):
    d = tmp_path / "rp"
    shutil.copytree(SAMPLES / "ragpulse", d)
    code, out = _convert(d, d / "2_passages.jsonl")
    assert code == 1 and "is the input trace" in out


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_fifo_directory_and_socket_are_not_replaced(tmp_path):
    """(A device is refused by the same S_ISREG test; the test does not risk /dev/null as root.)"""
    import socket

    src = _copy(tmp_path)
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    sock_path = tmp_path / "s.sock"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    try:
        for out in (fifo, tmp_path, sock_path):
            code, msg = _convert(src, out)
            assert code == 1 and "not a regular file" in msg, msg
    finally:
        sock.close()
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and stat.S_ISSOCK(os.lstat(sock_path).st_mode)


def test_missing_directory_is_one_line(tmp_path):
    code, out = _convert(_copy(tmp_path), tmp_path / "nope" / "x.parquet")
    assert code == 1 and "does not exist" in out and "Traceback" not in out


def test_new_and_replaced_outputs_get_the_umask_mode(tmp_path):
    src = _copy(tmp_path)
    out = tmp_path / "out.parquet"
    old = os.umask(0o022)
    try:
        assert _convert(src, out)[0] == 0
        assert stat.S_IMODE(out.stat().st_mode) == 0o644
        os.umask(0o002)
        assert _convert(src, out)[0] == 0  # replacing a regular file is fine
        assert stat.S_IMODE(out.stat().st_mode) == 0o664
    finally:
        os.umask(old)
    assert len(load_trace(out)) == len(load_trace(src))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "out.parquet"]
