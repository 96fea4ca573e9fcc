"""The step clock's workload: the SGLang scheduler oracle's JSONL rows and knobs.

``../shared/oracle/drive_scheduler.py`` (SCHEDULER.md) replays token-id workloads through SGLang
0.5.23's own event loop, one loop pass per step. ``kvplan step-replay`` replays the same rows
through kvplan's scheduler; this module reads them and turns each into the request kvplan serves:
its page keys (equal exactly for equal pages), its ``max_new_tokens`` after
``init_req_max_new_tokens`` and the output the oracle's scripted model emits for it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simulator.engine.request import SimRequest
from simulator.engine.server_state import init_req_max_new_tokens
from simulator.errors import ConfigError


@dataclass(frozen=True)
class StepKnobs:
    """The oracle's flags with its defaults, under kvplan's names (oracle name in comments)."""

    page_size: int = 1
    full_tokens: int = 4096  # --full-size
    swa_tokens: int = 1024  # --swa-size
    window: int = 128
    no_swa: bool = False
    max_running_requests: int = 16
    chunked_prefill_size: int = 512
    max_prefill_tokens: int = 16384
    schedule_policy: str = "fcfs"
    schedule_conservativeness: float = 1.0
    session_gap: int = 1
    context_length: int = 8192  # --max-context-len
    waiting_prefix_refresh: bool = True
    disable_overlap_schedule: bool = False
    ignore_eos: bool = True
    eos_id: int | None = None
    queue_head: int = 16
    max_steps: int = 1_000_000  # the run stops with an error at this step, as the oracle's does

    @property
    def full_pool(self) -> int:
        """The FULL pool in tokens, floored to whole pages."""
        return self.full_tokens // self.page_size * self.page_size

    @property
    def swa_pool(self) -> int | None:
        """The SWA pool in tokens, floored to whole pages (None: full-attention model)."""
        return None if self.no_swa else self.swa_tokens // self.page_size * self.page_size


@dataclass(frozen=True)
class StepRow:
    """One workload row as the scripted model runs it."""

    rid: str
    session: str | None
    arrival_step: int
    prompt_len: int
    output_len_script: int
    max_new_tokens: int  # after init_req_max_new_tokens
    ignore_eos: bool
    tokens: list[int]  # prompt ++ the output tokens the model emits
    output_len: int  # tokens the request generates before it finishes
    finish_reason: str  # "length" or "stop"


def read_rows(path: str | Path) -> list[dict]:
    """The workload's JSON lines, checked for the keys the oracle requires."""
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            for key in ("rid", "input_ids", "output_ids"):
                if key not in row:
                    raise ConfigError(f"{path}:{n}: missing key {key!r}")
            if not row["input_ids"] or not row["output_ids"]:
                raise ConfigError(f"{path}:{n}: input_ids and output_ids must be non-empty")
            rows.append(row)
    return rows


def default_eos_id(rows: list[dict]) -> int:
    """The oracle's default EOS id: the largest token id of the workload + 1."""
    return max(max(max(r["input_ids"]), max(r["output_ids"])) for r in rows) + 1


def script_row(row: dict, knobs: StepKnobs, eos_id: int) -> StepRow:
    """What the oracle's scripted model makes of ``row`` (SCHEDULER.md, "The scripted model").

    With L script tokens and M the clipped ``max_new_tokens``: M < L finishes by length at M;
    without ``ignore_eos`` and L < M the L-th token is EOS (finish ``stop``); with it and M > L
    EOS filler runs to M."""
    out = list(row["output_ids"])
    n_out = len(out)
    ignore_eos = bool(row.get("ignore_eos", knobs.ignore_eos))
    requested = int(row.get("max_new_tokens", n_out))
    prompt = list(row["input_ids"])
    max_new = init_req_max_new_tokens(
        requested, len(prompt), knobs.context_length, knobs.full_pool, knobs.page_size
    )
    if max_new <= n_out:
        emitted, reason = out[:max_new], "length"
    elif not ignore_eos:
        emitted, reason = out[:-1] + [eos_id], "stop"
    else:
        emitted, reason = out + [eos_id] * (max_new - n_out), "length"
    return StepRow(
        rid=str(row["rid"]),
        session=row.get("session"),
        arrival_step=int(row.get("arrival_step", 0)),
        prompt_len=len(prompt),
        output_len_script=n_out,
        max_new_tokens=max_new,
        ignore_eos=ignore_eos,
        tokens=prompt + emitted,
        output_len=len(emitted),
        finish_reason=reason,
    )


class PageKeys:
    """Exact page keys for token lists: one int per distinct page content."""

    def __init__(self, page_size: int) -> None:
        self.page_size = page_size
        self._ids: dict[tuple[int, ...], int] = {}

    def __call__(self, tokens: list[int]) -> np.ndarray:
        p, ids = self.page_size, self._ids
        if p == 1:
            return np.asarray(tokens, dtype=np.int64)
        keys = [ids.setdefault(tuple(tokens[i : i + p]), len(ids)) for i in range(0, len(tokens) // p * p, p)]
        return np.asarray(keys, dtype=np.int64)


def sim_request(row: StepRow, keys: PageKeys, index: int) -> SimRequest:
    """The request kvplan's server serves for ``row``."""
    return SimRequest(
        rid=row.rid,
        pages=keys(row.tokens),
        prompt_len=row.prompt_len,
        output_len=row.output_len,
        session=row.session,
        index=index,
        ignore_eos=row.ignore_eos,
        max_new_tokens=row.max_new_tokens,
    )
