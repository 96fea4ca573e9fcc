"""Issue 9: the bad-input corpus (tests/bad_input, docs/bad-input.md) through every command.

Every input case of ``tests/bad_input/cases/inputs.json`` runs through each command that reads
traces (trace stats / head / convert, run, demo, cache-replay; op logs through ops stats) and every
case of ``flags.json`` through its command, in process with typer's test runner and a timeout per
command. Each must end as its case says: a one-line ``kvplan: error:`` containing the expected
substring (file, line and field) with a non-zero exit status, or the exact result (requests and
token totals). Never a traceback, never a hang. Pipes, FIFOs and signals run in subprocesses.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import typer.testing
from typer.testing import CliRunner

from simulator.cli.main import app
from traces import load_trace

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "bad_input"
CASES = CORPUS / "cases"
INPUTS = json.loads((CASES / "inputs.json").read_text())
FLAGS = json.loads((CASES / "flags.json").read_text())
FLAG_TRACE = CASES / FLAGS["trace"]
TIMEOUT_S = 20  # per command; the slowest case takes well under a second
_CLI = typer.testing._get_command(app)


class _Runner(CliRunner):
    """typer's test runner on a click command built once: typer rebuilds the whole command tree on
    every invoke (~20 ms with kvplan's flag tables), most of the corpus's time otherwise."""

    def invoke(self, app, *args, **kwargs):
        build = typer.testing._get_command
        typer.testing._get_command = lambda _app: _CLI
        try:
            return super().invoke(app, *args, **kwargs)
        finally:
            typer.testing._get_command = build


runner = _Runner()
COUNTS = {"inputs": 0, "flags": 0, "runs": 0, "subprocesses": 0, "commands": set(), "ids": set()}


class CaseTimeout(BaseException):
    """Raised by the alarm: a BaseException, so that the test runner does not swallow it."""


@contextmanager
def deadline(seconds: float):
    def on_alarm(signum, frame):
        raise CaseTimeout(f"no answer within {seconds} s (a hang)")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def invoke(argv: list[str], stdin: bytes | None = None):
    """Run kvplan in process; fail on a hang or on an exception that escaped the CLI."""
    COUNTS["runs"] += 1
    with deadline(TIMEOUT_S):
        res = runner.invoke(app, argv, input=stdin)
    shown = f"kvplan {' '.join(argv)}\n--- stdout\n{res.stdout[-2000:]}\n--- stderr\n{res.stderr[-2000:]}"
    assert res.exception is None or isinstance(res.exception, SystemExit), (
        f"{shown}\nexception escaped: {res.exception!r}"
    )
    assert "Traceback" not in res.output, shown
    return res, shown


def check_error(res, shown: str, needle: str, exit_code: int | None = None) -> None:
    """A non-zero exit with one ``kvplan: error:`` line holding ``needle`` (and only warnings besides)."""
    assert res.exit_code != 0, shown
    if exit_code is not None:
        assert res.exit_code == exit_code, shown
    if res.exit_code == 3:  # a failed run: its report says why; no error line
        assert needle in res.output, shown
        return
    errs = res.stderr.strip().splitlines()
    others = [line for line in errs if not line.startswith(("kvplan: error: ", "kvplan: warning: "))]
    errors = [line for line in errs if line.startswith("kvplan: error: ")]
    assert len(errors) == 1 and not others, shown
    assert needle in errors[0], f"{shown}\nexpected substring: {needle!r}"


def command_argv(command: str, target: str, args: list[str], tmp: Path) -> list[str]:
    return {
        "trace stats": ["trace", "stats", "--json", *args, target],
        "trace head": ["trace", "head", *args, target],
        "trace convert": ["trace", "convert", *args, target, "-o", str(tmp / "out.parquet")],
        "run": ["run", "--trace", target, *args, "--json"],
        "demo": ["demo", "--trace", target, "--json"],
        "cache-replay": ["cache-replay", target, "--json"],
        "ops stats": ["ops", "stats", target],
    }[command]


def check_result(command: str, res, shown: str, want: dict, tmp: Path) -> None:
    """The exact result of a valid read: requests and token totals as each command reports them."""
    n, n_in, n_out = want["requests"], want.get("input_tokens"), want.get("output_tokens")
    rejected = want.get("rejected", 0)
    if command == "trace stats":
        s = json.loads(res.stdout)
        assert (s["requests"], s["total_input_tokens"], s["total_output_tokens"]) == (n, n_in, n_out), shown
    elif command == "trace head":
        rows = res.stdout.strip().splitlines()[1:]
        assert len(rows) == min(n, 10), shown
    elif command == "trace convert":
        assert f"wrote {n:,} requests" in res.stderr, shown
        req = load_trace(tmp / "out.parquet").requests
        assert (len(req), int(req["prompt_len"].sum()), int(req["output_len"].sum())) == (n, n_in, n_out)
    elif command == "run":
        s = json.loads(res.stdout)
        assert (s["requests_submitted"], s["rejected"], s["aborted"]) == (n, rejected, 0), shown
        if not rejected:
            assert (s["total_prompt_tokens"], s["total_output_tokens"]) == (n_in, n_out), shown
    elif command == "demo":
        s = json.loads(res.stdout)
        assert (s["requests"], s["served"] + s["rejected"], s["rejected"]) == (n, n, rejected), shown
    elif command == "cache-replay":
        s = json.loads(res.stdout.strip().splitlines()[-1])["summary"]
        assert (s["requests"], s["aborted"], s["total_prompt_tokens"]) == (n, 0, n_in), shown


def run_input_case(case: dict, command: str, tmp: Path) -> None:
    want = case.get("per_command", {}).get(command, case["expect"])
    stdin = None
    target = str(CASES / case["target"])
    if case["via"] == "stdin":
        stdin, target = (CASES / case["target"]).read_bytes(), "-"
    res, shown = invoke(command_argv(command, target, case["args"], tmp), stdin)
    COUNTS["commands"].add(command)
    if "warning" in want:
        assert any(
            line.startswith("kvplan: warning: ") and want["warning"] in line
            for line in res.stderr.splitlines()
        ), shown
    if "error" in want and (want.get("exit") or 1) != 0:
        check_error(res, shown, want["error"], want.get("exit"))
        if "result" in want:
            check_result(command, res, shown, want["result"], tmp)
        return
    assert res.exit_code == 0, shown
    check_result(command, res, shown, want["result"], tmp)


@pytest.mark.parametrize("case", INPUTS, ids=[c["id"] for c in INPUTS])
def test_input_case(case, tmp_path):
    COUNTS["inputs"] += 1
    COUNTS["ids"].add(case["id"])
    for command in case["commands"]:
        run_input_case(case, command, tmp_path)


def _setup(steps: list[list[str]], subst) -> None:
    for step in steps:
        kind, *paths = (subst(p) for p in step)
        if kind == "file":
            Path(paths[0]).write_text("keep me\n")
        elif kind == "dir":
            Path(paths[0]).mkdir()
        elif kind == "fifo":
            os.mkfifo(paths[0])
        elif kind == "symlink":
            os.symlink(paths[0], paths[1])
        elif kind == "hardlink":
            os.link(paths[0], paths[1])
        elif kind == "copy":
            shutil.copyfile(paths[0], paths[1])


class WorkStarted(BaseException):
    """A flag case got as far as serving requests before its bad value was refused."""


@pytest.fixture
def no_work_before_checks(monkeypatch):
    """Refusals of flag values must come before any work (issue 9: all flags validated up front)."""

    def refuse(*args, **kwargs):
        raise WorkStarted("the simulation started before the flag values were checked")

    import simulator.cli.cache_replay_cmd
    import simulator.run

    monkeypatch.setattr(simulator.run, "_serve", refuse)
    monkeypatch.setattr(simulator.cli.cache_replay_cmd, "replay", refuse)


@pytest.mark.parametrize("case", FLAGS["cases"], ids=[c["id"] for c in FLAGS["cases"]])
def test_flag_case(case, tmp_path, request):
    COUNTS["flags"] += 1
    if case["exit"] in (1, 2) and not case.get("late"):
        request.getfixturevalue("no_work_before_checks")

    def subst(text: str) -> str:
        return (
            text.replace("{trace}", str(FLAG_TRACE))
            .replace("{cases}", str(CASES))
            .replace("{tmp}", str(tmp_path))
        )

    _setup(case.get("setup", []), subst)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and not p.is_symlink()}
    res, shown = invoke([subst(a) for a in case["argv"]])
    if case["exit"] == 0:  # a valid value: the command finishes and reports what happened
        assert res.exit_code == 0 and case["error"] in res.stdout, shown
    else:
        check_error(res, shown, subst(case["error"]), case["exit"])
    for path, data in before.items():  # a refused output never replaces what was there
        assert path.read_bytes() == data, f"{shown}\n{path} was changed"


# --- what needs a real pipe, FIFO or signal -------------------------------------------------------
KVPLAN = [sys.executable, "-m", "simulator.cli.main"]


def _subprocess(args, **kw) -> subprocess.CompletedProcess:
    COUNTS["subprocesses"] += 1
    return subprocess.run(args, capture_output=True, timeout=60, cwd=ROOT, **kw)


def test_gzip_through_a_real_pipe():
    data = (CASES / "mooncake.jsonl.gz").read_bytes()
    proc = _subprocess([*KVPLAN, "trace", "stats", "--json", "-"], input=data)
    assert proc.returncode == 0 and b"Traceback" not in proc.stderr, proc.stderr
    assert json.loads(proc.stdout)["requests"] == 3


def test_truncated_gzip_through_a_real_pipe():
    data = (CASES / "gzip-truncated.jsonl.gz").read_bytes()
    proc = _subprocess([*KVPLAN, "run", "--trace", "-", "--json"], input=data)
    assert proc.returncode == 1 and b"Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.decode().startswith("kvplan: error: <stdin>"), proc.stderr


def test_fifo_is_read_once(tmp_path):
    fifo = tmp_path / "trace.fifo"
    os.mkfifo(fifo)
    data = (CASES / "mooncake-crlf.jsonl").read_bytes()
    writer = threading.Thread(target=lambda: fifo.write_bytes(data), daemon=True)
    writer.start()
    res, shown = invoke(["trace", "stats", "--json", str(fifo)])
    writer.join(5)
    assert res.exit_code == 0 and json.loads(res.stdout)["requests"] == 3, shown


def test_closed_stdout_is_not_a_traceback():
    """``kvplan trace head ... | head -c 1``: the reader of stdout goes away (SIGPIPE / EPIPE)."""
    trace = ROOT / "traces" / "data" / "mooncake_arxiv_head800.jsonl"
    proc = subprocess.Popen(
        [*KVPLAN, "trace", "head", "-n", "800", str(trace)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    COUNTS["subprocesses"] += 1
    proc.stdout.read(1)
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=60) != 0 or err == b""
    assert b"Traceback" not in err and b"Exception ignored" not in err, err


def test_interrupt_is_not_a_traceback(tmp_path):
    """Ctrl-C while kvplan waits on a FIFO: it stops with a non-zero status, no traceback. Opening
    the FIFO for writing returns once kvplan has opened it, so the signal lands in the reader."""
    fifo = tmp_path / "trace.fifo"
    os.mkfifo(fifo)
    proc = subprocess.Popen(
        [*KVPLAN, "run", "--trace", str(fifo)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT
    )
    COUNTS["subprocesses"] += 1
    with open(fifo, "wb") as writer:
        writer.write((CASES / "mooncake-crlf.jsonl").read_bytes()[:40])
        writer.flush()
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode != 0, out
    assert b"Traceback" not in err, err


@pytest.mark.parametrize("command", [["run", "--trace"], ["cache-replay"], ["demo", "--trace"]])
def test_out_of_memory_is_one_line(command):
    """A 2**30-token prompt (the documented maximum) at page size 1 needs 8 GiB of page ids: under
    a 3 GiB address-space limit, one ``kvplan: error: out of memory`` line, never a traceback."""
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, resource.getrlimit(resource.RLIMIT_AS)[1]))

    proc = _subprocess([*KVPLAN, *command, str(CASES / "azure-max-length.csv")], preexec_fn=limit)
    err = proc.stderr.decode()
    assert "Traceback" not in err, err
    if command[0] == "cache-replay":
        assert proc.returncode == 1, err
        assert err.strip().splitlines()[-1].startswith("kvplan: error: out of memory"), err
    else:
        # Served runs build page keys lazily for big traces (traces/pages.py), so the prompt
        # reaches validate_input_length and is rejected as SGLang rejects it (exit 3).
        assert proc.returncode == 3, err
        assert err.strip().splitlines()[-1].startswith("kvplan: error: 1 of 1 requests failed"), err
        assert "context" in proc.stdout.decode().lower(), proc.stdout.decode()[:2000]


def test_generator_reproduces_the_corpus(tmp_path):
    """Re-running the generator writes the committed corpus byte for byte (parquet: same table and
    metadata, so that another pyarrow release writing other bytes is no failure)."""
    sys.path.insert(0, str(CORPUS))
    try:
        from generate import write_corpus
    finally:
        sys.path.remove(str(CORPUS))
    counts = write_corpus(tmp_path / "cases")
    fresh = sorted(p.relative_to(tmp_path / "cases") for p in (tmp_path / "cases").rglob("*") if p.is_file())
    committed = sorted(p.relative_to(CASES) for p in CASES.rglob("*") if p.is_file())
    assert fresh == committed
    for rel in fresh:
        a, b = (tmp_path / "cases" / rel).read_bytes(), (CASES / rel).read_bytes()
        if a != b and rel.suffix == ".parquet":
            import pyarrow.parquet as pq

            ta, tb = pq.read_table(tmp_path / "cases" / rel), pq.read_table(CASES / rel)
            assert ta.equals(tb) and ta.schema.metadata == tb.schema.metadata, rel
        else:
            assert a == b, rel
    malformed = sum("error" in c["expect"] for c in INPUTS)
    assert malformed >= 215 and counts["flags"] >= 300, (malformed, counts)


def test_corpus_summary(request):
    """Runs last in this module: the counts, printed (pytest -s) and in the terminal summary."""
    malformed = sum("error" in c["expect"] for c in INPUTS if any(c["id"] == i for i in COUNTS["ids"]))
    line = (
        f"bad-input corpus: {COUNTS['inputs']} input cases ({malformed} malformed) through "
        f"{len(COUNTS['commands'])} commands "
        f"({', '.join(sorted(COUNTS['commands']))}), {COUNTS['flags']} flag cases, "
        f"{COUNTS['runs']} in-process runs, {COUNTS['subprocesses']} subprocesses; "
        "0 tracebacks, 0 hangs"
    )
    print(line)
    request.config._kvplan_corpus_summary = line
    if hasattr(request.config, "workeroutput"):  # an xdist worker: the controller prints it
        request.config.workeroutput["kvplan_corpus_summary"] = line
    if COUNTS["inputs"] == len(INPUTS) and COUNTS["flags"] == len(FLAGS["cases"]):
        assert malformed >= 215 and COUNTS["flags"] >= 300
