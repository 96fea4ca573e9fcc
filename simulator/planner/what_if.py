"""What-if transforms of a trace for ``kvplan plan --what-if``: "at 2x the rate", "twice the sessions".

* :func:`scale_rate` (``rate=K``): the same requests, arrival times compressed by K around the
  first arrival (``t' = t0 + (t - t0) / K``): K times the request rate, same sessions, same
  content. A closed-loop turn (no arrival time) keeps waiting for its previous turn.
* :func:`multiply_sessions` (``sessions=K``): K times the sessions. Each session (a tree of turns
  linked by ``parent``) gets ``K - 1`` copies (a fractional K copies that share of the sessions,
  chosen by the seed) with new request and session ids, shifted in time by a random offset that
  keeps the copy inside the trace's time span (seeded: the same seed gives the same trace). A
  copy shares with the other sessions exactly what its original shared (a system prompt, a
  common document: content that appears in more than one session of the original); what was
  its own (its conversation) is fresh content, so a copy is a new user with the same shape, not
  a free cache hit on its original.

Both return a new :class:`traces.Trace`; neither changes the input.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from simulator.errors import FlagError
from traces.schema import BlockContent, Content, TokenContent, Trace, gather_ranges, make_requests

WHAT_IFS = ("rate", "sessions")


@dataclass(frozen=True)
class WhatIf:
    """One ``--what-if NAME=FACTOR``."""

    name: str
    factor: float

    @property
    def text(self) -> str:
        return f"{self.name}={self.factor:g}"


def parse_what_if(text: str) -> WhatIf:
    """``rate=2`` or ``sessions=1.5`` (factor >= 1 for sessions, > 0 for rate)."""
    name, sep, raw = text.partition("=")
    name = name.strip()
    if not sep or name not in WHAT_IFS:
        raise FlagError(f"--what-if {text!r}: expected rate=K or sessions=K")
    try:
        factor = float(raw)
    except ValueError:
        raise FlagError(f"--what-if {text!r}: {raw.strip()!r} is not a number") from None
    low_ok = factor >= 1 if name == "sessions" else factor > 0
    if not (math.isfinite(factor) and low_ok):
        need = ">= 1" if name == "sessions" else "> 0"
        raise FlagError(f"--what-if {text!r}: the factor must be a finite number {need}")
    return WhatIf(name, factor)


def apply_what_if(trace: Trace, what_if: WhatIf, seed: int = 0) -> Trace:
    """The trace under one what-if."""
    if what_if.name == "rate":
        return scale_rate(trace, what_if.factor)
    return multiply_sessions(trace, what_if.factor, seed=seed)


def scale_rate(trace: Trace, factor: float) -> Trace:
    """The trace at ``factor`` times its request rate (arrival gaps divided by ``factor``)."""
    if not (factor > 0 and math.isfinite(factor)):
        raise FlagError(f"--what-if rate: the factor must be a finite number > 0, got {factor}")
    req = trace.requests.copy()
    arrival = req["arrival_s"].to_numpy(np.float64)
    known = ~np.isnan(arrival)
    if known.any():
        t0 = float(arrival[known].min())
        req["arrival_s"] = np.where(known, t0 + (arrival - t0) / factor, np.nan)
    return Trace(req, trace.content, f"{trace.source} (rate x{factor:g})", trace.closed_loop)


def session_roots(parent: np.ndarray) -> np.ndarray:
    """The first turn (root row) of every row's session, following ``parent`` links."""
    from traces.readers.common import roots_and_depths

    return roots_and_depths(np.asarray(parent, dtype=np.int64))[0]


def multiply_sessions(trace: Trace, factor: float, *, seed: int = 0) -> Trace:
    """The trace with ``factor`` times the sessions (see the module docstring); rows stay in
    arrival order, parents before children."""
    req = trace.requests
    arrival = req["arrival_s"].to_numpy(np.float64)
    if np.isnan(arrival).any():
        raise FlagError(
            "--what-if sessions: this trace's later turns wait on a closed loop (no arrival "
            "times); for bench_multiturn workloads give more --num-clients instead"
        )
    if factor < 1:
        raise FlagError(f"--what-if sessions: the factor must be >= 1, got {factor}")
    roots = session_roots(req["parent"].to_numpy())
    sessions = np.unique(roots)
    rng = np.random.default_rng(seed)
    copies = _copies_per_session(len(sessions), factor, rng)
    t0, t1 = float(arrival.min()), float(arrival.max())
    pieces = [np.arange(len(req))]
    shifts = [np.zeros(len(req))]
    copy_no = [np.zeros(len(req), dtype=np.int64)]
    for k in range(1, int(copies.max(initial=0)) + 1):
        chosen = sessions[copies >= k]
        rows = np.flatnonzero(np.isin(roots, chosen))
        start = _session_bounds(arrival, roots, chosen)
        offset = _offsets(start, t0, t1, rng)
        pieces.append(rows)
        shifts.append(offset[np.searchsorted(chosen, roots[rows])])
        copy_no.append(np.full(len(rows), k, dtype=np.int64))
    return _assemble(trace, np.concatenate(pieces), np.concatenate(shifts), np.concatenate(copy_no), factor)


def _copies_per_session(n: int, factor: float, rng: np.random.Generator) -> np.ndarray:
    """Copies of each session: ``floor(factor) - 1`` each, plus one more for a seeded choice of
    ``round(frac(factor) * n)`` sessions."""
    whole = int(math.floor(factor))
    copies = np.full(n, whole - 1, dtype=np.int64)
    extra = int(round((factor - whole) * n))
    if extra:
        copies[rng.choice(n, size=extra, replace=False)] += 1
    return copies


def _session_bounds(arrival: np.ndarray, roots: np.ndarray, chosen: np.ndarray) -> np.ndarray:
    """(first arrival, last arrival) of each chosen session, as an (n, 2) array."""
    idx = np.searchsorted(chosen, roots)
    inside = np.isin(roots, chosen)
    first = np.full(len(chosen), np.inf)
    last = np.full(len(chosen), -np.inf)
    np.minimum.at(first, idx[inside], arrival[inside])
    np.maximum.at(last, idx[inside], arrival[inside])
    return np.stack([first, last], axis=1)


def _offsets(bounds: np.ndarray, t0: float, t1: float, rng: np.random.Generator) -> np.ndarray:
    """A time shift per session that puts its copy at a uniform start inside [t0, t1] (a session
    longer than the span starts at t0)."""
    first, last = bounds[:, 0], bounds[:, 1]
    latest = np.maximum(t1 - (last - first), t0)
    start = t0 + rng.random(len(first)) * (latest - t0)
    return start - first


def _assemble(trace: Trace, rows: np.ndarray, shift: np.ndarray, copy_no: np.ndarray, factor: float) -> Trace:
    """The new trace from (source row, time shift, copy number) triples, sorted by arrival."""
    req = trace.requests
    arrival = req["arrival_s"].to_numpy(np.float64)[rows] + shift
    order = np.lexsort((np.arange(len(rows)), arrival))  # stable: original order breaks ties
    rows, copy_no, arrival = rows[order], copy_no[order], arrival[order]
    n_old = len(req)
    # parent of (row r, copy k) is (parent[r], copy k): find its new position
    lookup = np.full((int(copy_no.max(initial=0)) + 1) * n_old, -1, dtype=np.int64)
    lookup[copy_no * n_old + rows] = np.arange(len(rows))
    parent_old = req["parent"].to_numpy(np.int64)[rows]
    parent = np.where(parent_old >= 0, lookup[np.maximum(copy_no * n_old + parent_old, 0)], -1)
    suffix = np.where(copy_no > 0, np.char.add("~", copy_no.astype(str)), "")
    rid = np.char.add(req["rid"].astype(str).to_numpy()[rows].astype(str), suffix)
    sid_old = req["session_id"].astype(object).to_numpy()[rows]
    sid = [None if pd.isna(s) else f"{s}{x}" for s, x in zip(sid_old, suffix, strict=True)]
    new_req = make_requests(
        rid.tolist(),
        arrival,
        req["prompt_len"].to_numpy()[rows],
        req["output_len"].to_numpy()[rows],
        session_id=sid,
        turn=req["turn"].to_numpy()[rows],
        parent=parent,
    )
    extra = [c for c in req.columns if c not in new_req.columns]
    for col in extra:
        new_req[col] = req[col].to_numpy()[rows]
    content = _copy_content(trace.content, rows, copy_no, session_roots(req["parent"].to_numpy()))
    return Trace(new_req, content, f"{trace.source} (sessions x{factor:g})", trace.closed_loop)


def _copy_content(content: Content, rows: np.ndarray, copy_no: np.ndarray, roots: np.ndarray) -> Content:
    """The content of the new rows: a copy's session-own units (blocks, or tokens) renamed per
    copy number, units seen in several sessions of the original kept."""
    taken = content.take(rows)
    units = taken.chain_ids if isinstance(content, BlockContent) else taken.tokens
    shared = _shared_units(content, roots)
    per_row = np.diff(taken.offsets)
    unit_copy = np.repeat(copy_no, per_row)
    idx, _ = gather_ranges(content.offsets[rows], np.diff(content.offsets)[rows])
    unit_shared = shared[idx]
    span = int(units.max(initial=-1)) + 1
    renamed = np.where((unit_copy > 0) & ~unit_shared, units + unit_copy * span, units)
    if isinstance(content, BlockContent):
        dense = np.unique(renamed, return_inverse=True)[1].astype(np.int64)
        return BlockContent(taken.offsets, dense, taken.block_lens)
    return TokenContent(taken.offsets, renamed.astype(np.int64))


def _shared_units(content: Content, roots: np.ndarray) -> np.ndarray:
    """Per unit of the original content: True when its prefix (a chain id, or a token's page
    key at page size 1) appears in more than one session."""
    if isinstance(content, BlockContent):
        offsets, keys = content.offsets, content.chain_ids
    else:
        from traces.pages import page_keys

        offsets, keys = page_keys(content, 1)
    session = np.repeat(roots, np.diff(offsets))
    pairs = pd.DataFrame({"k": keys, "s": session}).drop_duplicates()
    sessions_per_key = pairs.groupby("k")["s"].size()
    return sessions_per_key.reindex(keys).to_numpy() > 1
