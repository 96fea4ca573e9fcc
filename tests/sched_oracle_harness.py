"""Client side of the SGLang scheduler oracle, and the generated workloads it is fed.

``tests/sched_oracle_worker.py`` runs SGLang 0.5.23's own event loop (``drive_scheduler.py``)
in the oracle venv; :class:`SchedOracle` keeps one worker per refresh setting alive, sends it
workloads and returns the oracle's lines. :func:`kvplan_lines` replays the same workload through
``kvplan step-replay``'s engine side, and :func:`first_differences` compares every step key and
every request key.
"""

from __future__ import annotations

import json
import random
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.oracle_harness import oracle_dir, oracle_python

WORKER = Path(__file__).resolve().with_name("sched_oracle_worker.py")


class SchedOracle:
    """One long-lived scheduler-oracle worker for one refresh setting."""

    def __init__(self, refresh: str = "on", timeout_s: float = 600.0) -> None:
        self.proc = subprocess.Popen(
            [
                str(oracle_python("0.5.23")),
                str(WORKER),
                "--oracle-dir",
                str(oracle_dir()),
                "--refresh",
                refresh,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        ready = json.loads(self.proc.stdout.readline() or "{}")
        if not ready.get("ready"):
            raise RuntimeError("scheduler oracle worker did not start")
        self.n = 0

    def run(self, rows: list[dict], flags: list[str]) -> dict:
        """The oracle's answer for one workload: ``{"ok", "rc", "lines"}`` or an error."""
        self.n += 1
        self.proc.stdin.write(json.dumps({"id": self.n, "rows": rows, "flags": flags}) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:  # a loaded machine: do not wait for its shutdown
                self.proc.kill()
                self.proc.wait()


def knob_flags(knobs: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(oracle flags, kvplan step-replay flags) for one configuration."""
    names = {
        "page_size": ("--page-size", "--page-size"),
        "full_tokens": ("--full-size", "--full-tokens"),
        "swa_tokens": ("--swa-size", "--swa-tokens"),
        "window": ("--window", "--window"),
        "max_running_requests": ("--max-running-requests", "--max-running-requests"),
        "chunked_prefill_size": ("--chunked-prefill-size", "--chunked-prefill-size"),
        "schedule_policy": ("--schedule-policy", "--schedule-policy"),
        "schedule_conservativeness": ("--schedule-conservativeness", "--schedule-conservativeness"),
        "max_prefill_tokens": ("--max-prefill-tokens", "--max-prefill-tokens"),
        "session_gap": ("--session-gap", "--session-gap"),
        "context_length": ("--max-context-len", "--context-length"),
        "max_steps": ("--max-steps", "--max-steps"),
    }
    oracle, kv = [], []
    for k, v in knobs.items():
        if k in names:
            oracle += [names[k][0], str(v)]
            kv += [names[k][1], str(v)]
    if knobs.get("no_swa"):
        oracle.append("--no-swa")
        kv.append("--no-swa")
    if knobs.get("disable_overlap_schedule"):
        oracle.append("--disable-overlap-schedule")
        kv.append("--disable-overlap-schedule")
    if knobs.get("ignore_eos") is False:
        oracle.append("--no-ignore-eos")
        kv.append("--no-ignore-eos")
    return oracle, kv


def kvplan_lines(rows: list[dict], knobs: dict[str, Any]) -> list[dict]:
    """kvplan's step, request and run lines for ``rows`` (``kvplan step-replay --json``)."""
    from simulator.engine.step_replay import run_lines
    from simulator.engine.step_workload import StepKnobs

    kw = {k: v for k, v in knobs.items() if k in StepKnobs.__dataclass_fields__}
    return run_lines(rows, StepKnobs(**kw))


def crash_signature(crash: dict | None) -> tuple | None:
    """What must agree between SGLang's crash and kvplan's: the step, the exception type, and
    that it is the pools' conservation check at the end of a free group (SGLang's
    ``SWATokenToKVPoolAllocator.free_group_end``, kvplan's ``free_group_end`` in kv_allocator);
    the stacks themselves are each program's own."""
    if crash is None:
        return None
    error = crash["error"].split(":")[0]
    return crash["step"], error, any(w.endswith(" free_group_end") for w in crash["where"])


POOL_KEYS = ("full_used", "swa_used", "full_evictable", "swa_evictable")


def _normalised(line: dict) -> dict:
    """A crash step compared by its crash signature; its pool counters are left out. SGLang's
    assertion stops an eviction half-applied (``UnifiedRadixCache._apply_cache_actions`` applies
    the tree core's actions last-first, after the core has already dropped the node from the
    evictable counts), kvplan's stops it at the same check in its own order, so what the pools
    read at that moment is each program's own; the steps before it are compared in full."""
    if "crash" not in line:
        return line
    kept = {k: v for k, v in line.items() if k not in POOL_KEYS}
    return dict(kept, crash=crash_signature(line["crash"]))


def first_differences(oracle: list[dict], ours: list[dict], limit: int = 5) -> list[str]:
    """The first ``limit`` differences on step keys and request keys (every key both print; a
    ``crash`` compared by :func:`crash_signature`)."""
    out: list[str] = []
    for kind in ("step", "request"):
        a = [_normalised(x) for x in oracle if x["type"] == kind]
        b = [_normalised(x) for x in ours if x["type"] == kind]
        if len(a) != len(b):
            out.append(f"{kind} lines: oracle {len(a)}, kvplan {len(b)}")
        for x, y in zip(a, b, strict=False):
            keys = sorted(set(x) | set(y))
            diff = {k: (x.get(k), y.get(k)) for k in keys if x.get(k) != y.get(k)}
            if diff:
                where = x.get("step", x.get("rid"))
                out.append(f"{kind} {where}: {diff}")
                if len(out) >= limit:
                    return out
    return out


@dataclass(frozen=True)
class Shape:
    """How big a generated workload is. ``LARGE`` is the original shape (24 rows, prompts to
    1500 tokens, outputs to 120, arrivals to step 300, idle bursts 400 steps apart); ``COMPACT``
    keeps every mechanism at a fifth of the steps: 12 rows with prompts to 400 tokens and
    outputs to 60, plus a burst of short-prompt, long-output rows that arrive together, so the
    decode batch outgrows what the new_token_ratio reserved and retracts on pools of 800."""

    n: int = 24
    system: tuple[int, int] = (20, 300)
    new_tokens: tuple[int, ...] = (5, 30, 120, 400, 900)
    prompt_cap: int = 1500
    output: tuple[int, int] = (1, 120)
    arrival: tuple[int, int] = (60, 300)
    idle_gap: int = 400
    burst: int = 0
    burst_prompt: tuple[int, int] = (10, 80)
    burst_output: tuple[int, int] = (30, 90)


LARGE = Shape()
COMPACT = Shape(
    n=12, system=(16, 150), new_tokens=(3, 20, 60, 200, 400), prompt_cap=400, output=(1, 60),
    arrival=(20, 80), idle_gap=100, burst=5,
)  # fmt: skip


def generate(
    seed: int, n: int | None = None, vocab: int = 5000, style: str = "mixed", shape: Shape = LARGE
) -> list[dict]:
    """A workload exercising sessions, shared prefixes, long prompts (chunking), bursts and
    tight memory (retraction): deterministic in ``seed``. ``style`` "idle": three bursts
    ``shape.idle_gap`` steps apart (the server idles between them); "eos": half the rows stop
    at EOS well before a larger ``max_new_tokens`` (reservations the ratio discounts, NO_TOKEN
    under pressure). ``LARGE`` gives the rows of the original generator for every seed."""
    n = shape.n if n is None else n
    rng = random.Random(seed)
    systems = [[rng.randrange(vocab) for _ in range(rng.randint(*shape.system))] for _ in range(3)]
    rows: list[dict] = []
    sessions = max(1, n // 4)
    history: dict[int, list[int]] = {}
    eos_extra = (50, 400) if shape.prompt_cap > 400 else (20, 150)
    for i in range(n):
        s = rng.randrange(sessions)
        prev = history.get(s)
        if prev is None:
            base = list(rng.choice(systems)) if rng.random() < 0.6 else []
        else:
            base = prev
        new = [rng.randrange(vocab) for _ in range(rng.choice(shape.new_tokens))]
        prompt = (base + new)[-shape.prompt_cap :]
        out = [rng.randrange(vocab) for _ in range(rng.randint(*shape.output))]
        arrival = rng.choice([0, 0, rng.randint(0, shape.arrival[0]), rng.randint(0, shape.arrival[1])])
        if style == "idle":
            arrival = shape.idle_gap * (i * 3 // n) + rng.randint(0, 20)
        row: dict[str, Any] = {
            "rid": f"r{i}",
            "input_ids": prompt,
            "output_ids": out,
            "arrival_step": arrival,
        }
        if style == "eos" and rng.random() < 0.5:
            row.update(max_new_tokens=len(out) + rng.randint(*eos_extra), ignore_eos=False)
        if rng.random() < 0.5:
            row["session"] = f"s{s}"
            history[s] = prompt + out
        rows.append(row)
    return rows + _burst(seed, vocab, shape)


def _burst(seed: int, vocab: int, shape: Shape) -> list[dict]:
    """``shape.burst`` rows with short prompts and long outputs arriving within 4 steps (with
    "idle", in the first burst): admitted together on a reservation of ratio x output, they
    outgrow it and retract. Drawn from their own generator, so the other rows do not depend on
    them."""
    rng = random.Random(seed * 7919 + 1)
    rows = []
    for j in range(shape.burst):
        out = [rng.randrange(vocab) for _ in range(rng.randint(*shape.burst_output))]
        rows.append(
            {
                "rid": f"b{j}",
                "input_ids": [rng.randrange(vocab) for _ in range(rng.randint(*shape.burst_prompt))],
                "output_ids": out,
                "arrival_step": rng.randint(0, 3),
            }
        )
    return rows
