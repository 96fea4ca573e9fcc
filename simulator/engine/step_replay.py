"""kvplan's scheduler on a step clock, recorded as SGLang's scheduler oracle records SGLang.

Every loop pass of :class:`~simulator.engine.server.ServerModel` is one step, as every pass of
SGLang's ``event_loop_normal`` / ``event_loop_overlap`` is one step of
``../shared/oracle/drive_scheduler.py``. The driver adds no scheduling logic: it ingests the rows
due at the top of each pass (the server's ``on_pass`` hook, where SGLang calls
``ingest_requests``), reads what the server did through a few pass-through overrides, and writes
the oracle's step, request and run lines with the oracle's keys and definitions (SCHEDULER.md,
"Output"). Forward durations are one time unit each; nothing reads them.
"""

from __future__ import annotations

import traceback
from typing import Any

import simpy

from simulator.engine.config import SimConfig
from simulator.engine.observer import ServerObserver
from simulator.engine.server import ServerModel
from simulator.engine.server_state import WAITING_PREFIX_REFRESH_INTERVAL, ServerPools
from simulator.engine.step_workload import PageKeys, StepKnobs, StepRow, sim_request
from simulator.sglang_bugs import PoolLeakError

STEP_KEYS = (
    "type", "step", "kind", "rids", "chunked", "extend_lens", "prefix_lens", "retracted", "finished",
    "aborted", "arrived", "new_token_ratio", "full_used", "swa_used", "full_evictable", "swa_evictable",
    "waiting", "running", "batch_is_full", "prefix_refresh", "queue_order",
    "queue_reordered", "lpm_deprioritized", "fully_idle", "evict_calls", "full_evicted", "swa_evicted",
    "swa_chunk_capped", "swa_blocked", "swa_limited_continuation", "anomalies", "crash",
)  # fmt: skip
"""The oracle's step keys in its order: always present up to ``queue_order``, then only when
the event happened (drive_scheduler.py ``STEP_KEYS``)."""


SWA_EVENT_KEYS = ("swa_chunk_capped", "swa_blocked", "swa_limited_continuation")
RETRACT_ABORT = "decode memory short even after retracting"  # ServerModel._retract's abort
# what SGLang's retract_decode says when it aborts the last request (schedule_batch.py)
RETRACT_ABORT_REASON = {
    "type": "abort",
    "message": "Out of memory even after retracting all other requests in the decode batch. "
    "Aborting the last request.",
    "status_code": 500,
    "err_type": None,
}


class StepCost:
    """The step clock's cost model: every forward takes one time unit."""

    def prefill_time(self, extend: list[int], prefix: list[int]) -> float:
        return 1.0

    def decode_time(self, bs: int, full_seq: int, swa_seq: int) -> float:
        return 1.0

    def decode_terms(self, bs: int) -> tuple[float, ...]:
        return (1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


class StepServer(ServerModel):
    """The server with pass-through reads for the step recorder (no decision is changed)."""

    rec: StepRecorder

    def _calc_priority(self) -> None:
        before = [id(r) for r in self.waiting]
        calls = self.refresh_calls
        super()._calc_priority()
        if self.refresh_calls > calls and calls % WAITING_PREFIX_REFRESH_INTERVAL == 0:
            self.rec.cur["prefix_refresh"] = True
        self.rec.on_calc_priority(self.waiting, [id(r) for r in self.waiting] != before)
        if self.lpm_deprioritized is not None:
            self.rec.cur["lpm_deprioritized"] = sorted(r.rid for r in self.lpm_deprioritized)

    def _get_new_batch_prefill(self):
        self.last_adder = None
        self.rec.scheduling_prefill = True  # until _prepare_extend returns (a crash keeps it)
        reqs = super()._get_new_batch_prefill()
        if not reqs:
            self.rec.scheduling_prefill = False
        adder = self.last_adder
        if adder is not None and self.pools.hybrid:
            for key, n in zip(SWA_EVENT_KEYS, adder.swa_events, strict=True):
                if n:
                    self.rec.cur[key] = self.rec.cur.get(key, 0) + n
        return reqs

    def _prepare_extend(self, batch):
        running = len(self.running)
        cached = super()._prepare_extend(batch)
        self.rec.scheduling_prefill = False
        if cached is not None:
            self.rec.on_prefill(batch, self.chunked, running)
        return cached

    def _abort_unservable(self) -> None:
        """Nothing runs and the head of the queue can never be admitted. kvplan's server aborts
        it; SGLang 0.5.23 has no such abort: its loop passes idle with the head blocked (for
        ever: nothing running frees memory), so the step clock does too, until ``max_steps``."""

    def _abort(self, req, detail: str) -> None:
        self.rec.aborted_outputs[req.rid] = (req.num_outputs, detail.startswith(RETRACT_ABORT))
        super()._abort(req, detail)

    def _on_idle(self) -> None:
        if self.rec.exited:  # the oracle's loop exited before this pass: it runs no on_idle
            return
        if self.rec.cur is not None:  # recorded before on_idle runs, as the oracle's wrapper does
            self.rec.cur["fully_idle"] = True
        super()._on_idle()

    def _prepare_decode(self):
        batch = super()._prepare_decode()
        if batch is not None:
            self.rec.on_decode(batch)
        return batch


class StepRecorder(ServerObserver):
    """Step lines and request records, in the oracle's keys (drive_scheduler.py ``Oracle``)."""

    def __init__(self, rows: list[StepRow], knobs: StepKnobs, emit) -> None:
        self.rows, self.knobs, self.emit = rows, knobs, emit
        self.eos_id = -1  # set by replay
        self.server: StepServer | None = None
        self.step = -1
        self.cur: dict[str, Any] | None = None
        self.pending = list(range(len(rows)))
        self.parent: dict[int, int] = {}
        last: dict[str, int] = {}
        for i, row in enumerate(rows):
            if row.session is not None and knobs.session_gap > 0:
                if row.session in last:
                    self.parent[i] = last[row.session]
                last[row.session] = i
        self.finish_step: dict[int, int] = {}
        self.info: dict[str, dict] = {}
        self.sims: list = []
        self.index = {row.rid: i for i, row in enumerate(rows)}
        self.running_after = 0
        self.arrival_order: dict[str, int] = {}
        self.aborted_outputs: dict[str, tuple[int, bool]] = {}
        self.last_kind = "idle"  # the kind of the last closed step (none yet: no batch)
        self.steps: list[dict] = []
        self.done = False
        self.last_prefill: set[str] = set()  # the last pass's prefill batch (SGLang's last_batch)
        self.scheduling_prefill = False  # the open pass is inside get_new_batch_prefill
        self.exited = False  # the oracle's loop exited at the top of this pass (see on_pass)
        self.crashed: dict | None = None  # the server raised (SGLang's loop would have died)
        self.stopped = False  # the run reached max_steps

    # ---- arrivals: the top of every pass --------------------------------------------------
    def _due(self, i: int, step: int) -> bool:
        if self.rows[i].arrival_step > step:
            return False
        p = self.parent.get(i)
        if p is None:
            return True
        f = self.finish_step.get(p)
        return f is not None and f + self.knobs.session_gap <= step

    def next_due_step(self) -> int | None:
        """The first step at which a pending row is due (parents have all finished)."""
        best = None
        for i in self.pending:
            p = self.parent.get(i)
            if p is not None and p not in self.finish_step:
                continue
            due = self.rows[i].arrival_step
            if p is not None:
                due = max(due, self.finish_step[p] + self.knobs.session_gap)
            best = due if best is None else min(best, due)
        return best

    def on_pass(self) -> None:
        """``ingest_requests``: close the last step, open the next, enqueue what is due."""
        srv = self.server
        if self.cur is not None:
            self._close()
            if not self.pending and srv.idle and not self.steps[-1]["running"] and not srv.in_flight:
                self.done = self.exited = True  # the oracle's loop exits here; this pass is not recorded
                return
        self.step += 1
        self.cur = dict(type="step", step=self.step, kind="idle", rids=[], chunked=None, extend_lens=None,
                        prefix_lens=None, retracted=[], finished=[], aborted=[], arrived=[])  # fmt: skip
        self.running_after = None
        self.scheduling_prefill = False
        if self.step >= self.knobs.max_steps:  # drive_scheduler.py Oracle.ingest: a crash there
            self.stopped = True
            waiting = [r.rid for r in srv.waiting][:10]
            raise RuntimeError(f"--max-steps {self.knobs.max_steps} reached; waiting: {waiting}")
        due = [i for i in self.pending if self._due(i, self.step)]
        if due:
            taken = set(due)
            self.pending = [i for i in self.pending if i not in taken]
        for i in due:
            row = self.rows[i]
            self.cur["arrived"].append(row.rid)
            self.arrival_order[row.rid] = len(self.arrival_order)
            self.info[row.rid] = dict(
                type="request", rid=row.rid, session=row.session, arrival_step=self.step,
                first_prefill_step=None, finish_step=None, prompt_len=row.prompt_len,
                output_len_script=row.output_len_script, max_new_tokens=row.max_new_tokens,
                ignore_eos=row.ignore_eos, prefix_len_first=None, cached_tokens=None, retractions=0,
                prefill_chunks=0, decode_steps=0, output_len=None, finish_reason=None,
            )  # fmt: skip
            srv.submit(self.sims[i])
        # under overlap an idle server still processes the batch in flight (an EOS finisher's
        # extra decode step) in this pass and blocks only at the next one
        if srv.idle and srv.in_flight is None:
            self._skip_idle()

    def _skip_idle(self) -> None:
        """The server blocks until the next arrival: SGLang idles one pass per step until then.
        Waking it is scheduled after it blocked (a zero delay runs after the current event)."""
        nxt = self.next_due_step()
        if nxt is None:
            self.done = True
            return

        def wake(_event) -> None:
            srv = self.server
            while self.step + 1 < nxt:  # the idle passes in between
                self._close()
                self.step += 1
                self.cur = dict(self.steps[-1], step=self.step, arrived=[], finished=[])
                self.cur.pop("queue_order", None)
            srv._wakeup.succeed()

        self.server.env.timeout(0).callbacks.append(wake)

    # ---- reads of what the server did -------------------------------------------------------
    def count(self, key: str, n: int) -> None:
        """An optional step key: present only when non-zero."""
        if n and self.cur is not None:
            self.cur[key] = self.cur.get(key, 0) + n

    def on_calc_priority(self, waiting, reordered: bool) -> None:
        head = self.knobs.queue_head
        if head > 0:
            self.cur["queue_order"] = [r.rid for r in waiting[:head]]
        if reordered:
            self.cur["queue_reordered"] = True

    def on_prefill(self, batch, chunked, running_before: int) -> None:
        c = self.cur
        c["kind"] = "prefill"
        c["rids"] = [r.rid for r in batch]
        c["extend_lens"] = [r.extend_end - r.prefix_len for r in batch]
        c["prefix_lens"] = [r.prefix_len for r in batch]
        c["chunked"] = chunked.rid if chunked is not None and chunked in batch else None
        self.running_after = running_before
        for r in batch:  # the oracle's consistency probe: a cut prompt must be the chunked_req
            if r is not chunked and r.extend_end < r.prompt_len + r.num_outputs:
                msg = (
                    f"step {self.step}: {r.rid} prefilled only to {r.extend_end} of "
                    f"{r.prompt_len + r.num_outputs} tokens but chunked_req is "
                    f"{chunked.rid if chunked is not None else None}: it will decode on a partial prompt"
                )
                c.setdefault("anomalies", []).append(msg)
        for r in batch:
            rec = self.info[r.rid]
            rec["prefill_chunks"] += 1
            if rec["first_prefill_step"] is None:
                rec["first_prefill_step"] = self.step
                rec["prefix_len_first"] = r.prefix_len

    def on_decode(self, batch) -> None:
        c = self.cur
        c["kind"] = "decode"
        c["rids"] = [r.rid for r in batch]
        self.running_after = len(batch)
        for r in batch:
            self.info[r.rid]["decode_steps"] += 1

    def on_retract(self, t: float, reqs: list, ratio_before: float, ratio_after: float) -> None:
        for sim in reqs:
            self.cur["retracted"].append(sim.rid)
            self.info[sim.rid]["retractions"] += 1

    def on_finish(self, req) -> None:
        i = self.index[req.rid]
        row = self.rows[i]
        self.finish_step[i] = self.step
        self.cur["finished"].append(req.rid)
        if req.aborted:
            self.cur["aborted"].append(req.rid)
        out, reason, retractions = row.output_len, _finish_reason(row, self.eos_id), int(req.retractions)
        if req.aborted:
            out, by_retract = self.aborted_outputs.get(req.rid, (None, False))
            reason = RETRACT_ABORT_REASON if by_retract else {"type": "abort", "message": req.abort_reason}
            retractions += by_retract  # SGLang counts retract_decode's abort as a retraction
        self.info[req.rid].update(
            finish_step=self.step,
            cached_tokens=int(req.cached_tokens),
            retractions=retractions,
            output_len=out,
            finish_reason=reason,
            aborted=bool(req.aborted),
        )

    def crash(self, exc: BaseException) -> None:
        """The server raised in the open step: record it as the oracle records SGLang's crash
        (``{step, error, where}``, ``where`` the innermost kvplan frames)."""
        inner = exc.__cause__ or exc  # simpy re-raises a process's exception from the original
        frames = traceback.extract_tb(inner.__traceback__)
        # a compiled module's frame is named by its qualified name
        # ("simulator.kv_allocator...free_group_end" style): keep the function's own name,
        # as the pure-Python frame gives it, so both builds print the same crash
        where = [
            f"{f.filename[f.filename.rfind('simulator/') :]}:{f.lineno} {f.name.rsplit('.', 1)[-1]}"
            for f in frames
            if "simulator/" in f.filename
        ][-4:]
        name = "ValueError" if isinstance(exc, PoolLeakError) else type(exc).__name__  # SGLang's type
        self.crashed = dict(step=self.step, error=f"{name}: {exc}", where=where)
        if self.cur is not None:
            self.cur["crash"] = self.crashed

    # ---- end of a pass --------------------------------------------------------------------
    def _close(self) -> None:
        srv, c = self.server, self.cur
        cache = srv.cache
        full_ev, swa_ev = cache.evictable_tokens()
        full_used, swa_used = cache.used_tokens()
        running = self.running_after if self.running_after is not None else len(srv.running)
        if "crash" in c and self.scheduling_prefill and srv.running:
            # Scheduler.get_next_batch_to_run merges the last prefill batch into a local
            # running batch: an empty one is replaced by it (rebinding), a non-empty one merges it
            # in place. self.running_batch is assigned only after get_new_batch_prefill, so a
            # crash there leaves SGLang's running batch empty when it held only those joiners
            if all(r.rid in self.last_prefill for r in srv.running):
                running = 0
        self.last_prefill = set(c["rids"]) if c["kind"] == "prefill" else set()
        c.update(
            new_token_ratio=srv.ratio.current,
            full_used=full_used,
            swa_used=None if self.knobs.no_swa else swa_used,
            full_evictable=full_ev,
            swa_evictable=None if self.knobs.no_swa else swa_ev,
            waiting=len(srv.waiting),
            running=running,
            batch_is_full=srv.batch_is_full,
            prefix_refresh=bool(c.get("prefix_refresh", False)),
        )
        c.setdefault("queue_order", None)
        if c["kind"] == "idle" and "fully_idle" not in c and "crash" not in c:
            # on_idle ran (every batch-less pass; under overlap only after one) without finding
            # the server fully idle (a pass that crashed never reached it)
            if self.knobs.disable_overlap_schedule or self.last_kind == "idle":
                c["fully_idle"] = False
        self.last_kind = c["kind"]
        c["finished"].sort(key=self.arrival_order.__getitem__)  # the oracle walks its live list
        c["aborted"].sort(key=self.arrival_order.__getitem__)
        c = {k: c[k] for k in STEP_KEYS if k in c}
        self.steps.append(c)
        if self.emit is not None:
            self.emit(c)
        self.cur = None


def _finish_reason(row: StepRow, eos_id: int) -> dict:
    if row.finish_reason == "length":
        return {"type": "length", "length": row.max_new_tokens}
    return {"type": "stop", "matched": eos_id}


def sim_config(knobs: StepKnobs) -> SimConfig:
    """The SimConfig the step clock runs kvplan's server with (one forward at a time)."""
    return SimConfig(
        max_prefill_tokens=knobs.max_prefill_tokens,
        schedule_policy=knobs.schedule_policy,
        schedule_conservativeness=knobs.schedule_conservativeness,
        disable_overlap_schedule=knobs.disable_overlap_schedule,
        waiting_prefix_refresh="on" if knobs.waiting_prefix_refresh else "off",
        fast_forward=False,
    )


def server_pools(knobs: StepKnobs) -> ServerPools:
    """The oracle's pools (``make_scheduler``): sizes floored to pages; ``--no-swa`` mirrors the
    FULL pool on the SWA side with a window that never binds, as ``resolve_pools`` does."""
    full = knobs.full_pool
    return ServerPools(
        page_size=knobs.page_size,
        full_tokens=full,
        swa_tokens=full if knobs.no_swa else knobs.swa_pool,
        window=1 << 40 if knobs.no_swa else knobs.window,
        max_running_requests=knobs.max_running_requests,
        chunked_prefill_size=knobs.chunked_prefill_size if knobs.chunked_prefill_size > 0 else -1,
        hybrid=not knobs.no_swa,
        context_length=knobs.context_length,
    )


def replay(rows: list[StepRow], knobs: StepKnobs, emit=None, eos_id: int = -1) -> StepRecorder:
    """Run ``rows`` through kvplan's scheduler on the step clock; the recorder holds the lines."""
    env = simpy.Environment()
    rec = StepRecorder(rows, knobs, emit)
    rec.eos_id = eos_id
    keys = PageKeys(knobs.page_size)
    rec.sims = [sim_request(row, keys, i) for i, row in enumerate(rows)]
    srv = StepServer.__new__(StepServer)
    srv.rec = rec
    rec.server = srv
    StepServer.__init__(srv, env, sim_config(knobs), server_pools(knobs), StepCost(), rec)
    srv.on_pass = rec.on_pass
    real_evict = srv.cache._evict

    def counting_evict(full_shortfall: int, swa_shortfall: int):  # pass-through, as the oracle's
        res = real_evict(full_shortfall, swa_shortfall)
        if res.full_evicted or res.swa_evicted:
            rec.count("evict_calls", 1)
            rec.count("full_evicted", res.full_evicted)
            if not knobs.no_swa:
                rec.count("swa_evicted", res.swa_evicted)
        return res

    srv.cache._evict = counting_evict
    try:
        env.run()
    except (AssertionError, PoolLeakError) as exc:
        # the allocator's conservation check (kv_allocator: a pool freed past its size) stands
        # for SGLang's (allocator/swa.py: SWATokenToKVPoolAllocator.free_group_end), the idle
        # leak check for its on_idle one; SGLang's loop dies there, and the oracle records the
        # step and stops (its ``crash`` key)
        rec.crash(exc)
    except RuntimeError as exc:
        if not rec.stopped:
            raise
        rec.crash(exc)
    if rec.cur is not None:
        rec._close()
    return rec


def run_lines(raw_rows: list[dict], knobs: StepKnobs) -> list[dict]:
    """The oracle's output for ``raw_rows``: step lines, request lines (file order), run line."""
    from simulator.engine.step_workload import default_eos_id, script_row

    eos = knobs.eos_id if knobs.eos_id is not None else default_eos_id(raw_rows)
    rows = [script_row(r, knobs, eos) for r in raw_rows]
    rec = replay(rows, knobs, eos_id=eos)
    reqs = [rec.info[r.rid] for r in rows if r.rid in rec.info]
    return [*rec.steps, *reqs, run_line(rec, knobs, eos)]


def run_line(rec: StepRecorder, knobs: StepKnobs, eos_id: int) -> dict:
    """The run line: configuration, loop and the totals of the step events."""
    steps = rec.steps
    kinds = [s["kind"] for s in steps]
    counts = dict(
        steps=len(steps),
        prefill_steps=kinds.count("prefill"),
        decode_steps=kinds.count("decode"),
        idle_steps=kinds.count("idle"),
        fully_idle_steps=sum(1 for s in steps if s.get("fully_idle")),
        chunked_steps=sum(1 for s in steps if s["chunked"] is not None),
        retractions=sum(len(s["retracted"]) for s in steps),
        aborts=sum(len(s["aborted"]) for s in steps),
        refreshes=sum(1 for s in steps if s["prefix_refresh"]),
        queue_reorders=sum(1 for s in steps if s.get("queue_reordered")),
        arrivals=sum(len(s["arrived"]) for s in steps),
        finishes=sum(len(s["finished"]) for s in steps),
    )
    loop = "event_loop_normal" if knobs.disable_overlap_schedule else "event_loop_overlap"
    config = {k: getattr(knobs, k) for k in StepKnobs.__dataclass_fields__}
    config["eos_id"] = eos_id
    run = dict(type="run", simulator="kvplan", loop=loop, config=config, steps=len(steps), counts=counts)
    if rec.crashed is not None:
        c = rec.crashed
        run["crashed"] = c
        run["errors"] = [f"crashed at step {c['step']}: {c['error']}"]
    return run
