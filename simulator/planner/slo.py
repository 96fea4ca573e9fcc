"""Service-level objectives for ``kvplan plan``: a bound on a number of ``kvplan run --json``.

An SLO is ``PATH OP BOUND`` with PATH a dotted path into the run's summary (``ttft.p90``,
``cache_hit_rate``, ``latency.p99``, ``counters.retractions``), OP one of ``<=``, ``>=``, ``<``,
``>`` and BOUND a finite number; several are separated by commas:
``"ttft.p90<=1.0,cache_hit_rate>=0.6"``. Every SLO set also implies that no request was aborted
or rejected (the summary's ``failed`` is 0): a configuration that drops requests serves less
work, so its latencies would flatter it.

A configuration's distance from meeting the SLOs is its *normalised violation*: the sum over
SLOs of how far the value lies on the wrong side of the bound, relative to the bound
(``(value - bound) / |bound|`` for ``<=``), plus the share of failed requests. The planner's
"closest" candidate, when none meets every SLO, is the one with the smallest total.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from simulator.errors import FlagError

# The numeric paths of a `kvplan run --json` summary (provenance and per_round excepted);
# tests/test_plan_slo.py checks this list against a real run's summary.
SUMMARY_PATHS: tuple[str, ...] = (
    "requests",
    "request_rate",
    "requests_submitted",
    "aborted",
    "unfinished",
    "heartbeats",
    "average_prompt_len",
    "average_output_len",
    "total_prompt_tokens",
    "total_cached_tokens",
    "total_output_tokens",
    "cache_hit_rate",
    *(f"{m}.{s}" for m in ("ttft", "latency") for s in ("mean", "p50", "p90", "p99", "max")),
    "start_s",
    "finished_s",
    "duration_s",
    "input_throughput",
    "output_throughput",
    "request_throughput",
    "decode_steps",
    "prefill_batches",
    "decode_full_token_usage",
    "decode_swa_token_usage",
    "decode_full_token_usage_max",
    "decode_swa_token_usage_max",
    "capacity.full_tokens",
    "capacity.swa_tokens",
    "retractions",
    "retracted_requests",
    "sim_end_s",
    "rejected",
    "truncated",
    "failed",
)
# The engine's counters (counters.tree_evict_calls, ...) are valid paths too; their names
# depend on the tree, so they are checked against the first run's summary.
COUNTER_PREFIX = "counters."
_OPS = ("<=", ">=", "<", ">")
_SLO_RE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.]*)\s*(<=|>=|<|>)\s*(\S+)\s*$")
# The implied SLO: no aborted or rejected request.
FAILED_PATH = "failed"


@dataclass(frozen=True)
class Slo:
    """One objective: ``path op bound``."""

    path: str
    op: str
    bound: float

    @property
    def text(self) -> str:
        return f"{self.path}{self.op}{self.bound:g}"

    @property
    def upper(self) -> bool:
        """True for an upper bound (``<=``, ``<``): smaller values are better."""
        return self.op in ("<=", "<")

    def holds(self, value: float | None) -> bool:
        if value is None or math.isnan(value):
            return False
        return {
            "<=": value <= self.bound,
            ">=": value >= self.bound,
            "<": value < self.bound,
            ">": value > self.bound,
        }[self.op]

    def violation(self, value: float | None) -> float:
        """How far ``value`` lies on the wrong side of the bound, relative to the bound (0 when
        it holds; a strict bound missed by equality counts a hair above 0)."""
        if value is None or math.isnan(value):
            return math.inf
        if self.holds(value):
            return 0.0
        scale = abs(self.bound) if self.bound != 0 else 1.0
        gap = (value - self.bound) if self.upper else (self.bound - value)
        return max(gap / scale, 1e-9)


@dataclass(frozen=True)
class Verdict:
    """How one run's summary fares against the SLOs."""

    met: bool
    values: dict[str, float | None]
    violations: dict[str, float]  # by SLO text, plus "failed" (share of failed requests)

    @property
    def total(self) -> float:
        return math.fsum(self.violations.values())

    def failing(self) -> list[str]:
        return [name for name, v in self.violations.items() if v > 0]


def parse_slos(text: str) -> tuple[Slo, ...]:
    """``"ttft.p90<=1.0,cache_hit_rate>=0.6"`` as SLOs; a malformed item or an unknown path is
    one :class:`FlagError` line (the unknown path's lists every valid one)."""
    items = [s for s in text.split(",") if s.strip()]
    if not items:
        raise FlagError('--slo: no objective given; e.g. --slo "ttft.p90<=1.0,cache_hit_rate>=0.6"')
    out = []
    for item in items:
        m = _SLO_RE.match(item)
        if m is None:
            raise FlagError(
                f"--slo {item.strip()!r}: expected PATH OP NUMBER with OP one of {', '.join(_OPS)}"
            )
        path, op, raw = m.groups()
        try:
            bound = float(raw)
        except ValueError:
            raise FlagError(f"--slo {item.strip()!r}: {raw!r} is not a number") from None
        if not math.isfinite(bound):
            raise FlagError(f"--slo {item.strip()!r}: the bound must be finite")
        check_path(path)
        out.append(Slo(path, op, bound))
    paths = [s.path + s.op for s in out]
    if len(set(paths)) != len(paths):
        raise FlagError(f"--slo: an objective is given twice in {text!r}")
    return tuple(out)


def check_path(path: str, summary: Mapping[str, Any] | None = None) -> None:
    """Refuse a path that is not a number of the run summary (one line listing the valid ones)."""
    if summary is not None:
        if _lookup(summary, path) is not None:
            return
    elif path in SUMMARY_PATHS or (path.startswith(COUNTER_PREFIX) and len(path) > len(COUNTER_PREFIX)):
        return
    raise FlagError(
        f"--slo {path}: not a number of `kvplan run --json`; valid paths: "
        f"{', '.join(SUMMARY_PATHS)}, counters.<name>"
    )


def _lookup(summary: Mapping[str, Any], path: str) -> float | None:
    value: Any = summary
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def judge(summary: Mapping[str, Any] | None, slos: tuple[Slo, ...]) -> Verdict:
    """The verdict of one run (``summary`` None: a configuration SGLang refuses; it meets
    nothing and is infinitely far)."""
    if summary is None:
        inf = {s.text: math.inf for s in slos} | {FAILED_PATH: math.inf}
        return Verdict(False, {s.path: None for s in slos}, inf)
    values = {s.path: _lookup(summary, s.path) for s in slos}
    violations = {s.text: s.violation(values[s.path]) for s in slos}
    submitted = max(int(summary.get("requests_submitted", 0)), 1)
    failed = int(summary.get("aborted", 0)) + int(summary.get("rejected", 0))
    violations[FAILED_PATH] = failed / submitted
    values[FAILED_PATH] = float(failed)
    met = all(v == 0 for v in violations.values())
    return Verdict(met, values, violations)


def describe_failures(verdict: Verdict, slos: tuple[Slo, ...]) -> str:
    """``ttft.p90 = 1.31 > 1.0; 3 requests aborted or rejected`` for a failing verdict."""
    parts = []
    for s in slos:
        if verdict.violations.get(s.text, 0) > 0:
            value = verdict.values.get(s.path)
            shown = "n/a" if value is None else f"{value:.4g}"
            parts.append(f"{s.path} = {shown}, needs {s.op} {s.bound:g}")
    failed = verdict.values.get(FAILED_PATH)
    if verdict.violations.get(FAILED_PATH, 0) > 0:
        parts.append(
            "refused by SGLang's sizing" if failed is None else f"{failed:.0f} requests aborted or rejected"
        )
    return "; ".join(parts) if parts else "meets every SLO"
