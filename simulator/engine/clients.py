"""Client processes: *when* each request of a trace reaches the server model.

The server only serves what it is given; this module decides the send times, because they depend
on the workload kind and, for closed loops, on when earlier requests finished:

* **open loop** (``trace.closed_loop is None``): each request is sent at its trace arrival,
  relative to the first arrival and multiplied by ``cfg.time_scale``, or, with
  ``cfg.request_rate``, at Poisson arrival times in row order (seeded with ``cfg.seed``, first
  request at 0, as SGLang's ``bench_serving`` does). *Session rule*: a row with a parent (a later
  turn of a session) waits for that parent when ``cfg.think_time_s > 0`` or its own arrival is
  NaN; it is then sent at ``max(own arrival, parent finish + think time)`` (own arrival = -inf
  when NaN). Otherwise every row is sent at its own time, parent finished or not, as a real trace
  replay does.
* **sequential** (:class:`~traces.closed_loop.SequentialReplay`, the oracle's token JSONL): one
  request at a time in row order, each sent when the previous one finished (plus think time), so
  ``kvplan run`` on the oracle JSONL is a batch-1 replay. With ``cfg.request_rate`` the trace is
  served as an open loop instead.
* **bench_multiturn** (:class:`~traces.closed_loop.BenchMultiturnLoop`): the sender and response
  handler of SGLang's ``benchmark/hicache/bench_multiturn.py``, replayed event for event with the
  script's own random stream (``sender_rng()``), see :func:`_bench_multiturn`.

Every request's ``arrival_s`` is set to the simulated time it is submitted (the client's POST);
TTFT and latency are measured from there, as bench_multiturn measures them from the POST.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import simpy

from simulator.engine.config import SimConfig
from simulator.engine.request import SimRequest
from simulator.errors import ConfigError
from traces.gc_pause import collector_paused
from traces.pages import LazyPages
from traces.schema import Trace

if TYPE_CHECKING:  # loads with a closed-loop trace only (start-up time, issue 14)
    from traces.closed_loop import BenchMultiturnLoop


class Server(Protocol):
    """What the clients need from the server model."""

    def submit(self, req: SimRequest) -> simpy.Event:
        """Enqueue ``req`` now; the event succeeds (value ``req``) when it finishes or is aborted."""
        ...


@dataclass
class ClientStats:
    """What the client side did; the value of the process :func:`start_clients` returns."""

    mode: str  # "open" | "sequential" | "bench_multiturn"
    total: int  # rows in the trace (heartbeats included)
    submitted: int = 0
    completed: int = 0
    heartbeats: int = 0
    start_s: float = 0.0
    end_s: float = math.nan  # when the last request completed


def requests_from_trace(trace: Trace, page_size: int) -> list[SimRequest]:
    """One :class:`SimRequest` per trace row, with the exact page keys of its prompt ++ output.

    ``round`` is the row's ``turn``; ``index`` its row. Rows of a bench_multiturn trace without a
    session are the barrier heartbeats and are flagged ``heartbeat``.
    """
    if page_size < 1:
        raise ConfigError(f"page size must be >= 1, got {page_size}")
    with collector_paused():  # one object per row, no reference cycle (traces/gc_pause.py)
        return _requests(trace, page_size)


def _requests(trace: Trace, page_size: int) -> list[SimRequest]:
    """:func:`requests_from_trace`'s requests."""
    rows = trace.row_page_keys(page_size)  # a big trace: each request's keys on demand
    if rows is None:
        offsets, ids = trace.page_keys(page_size)  # the tree only compares pages: no dense ids needed
        offsets = offsets.tolist()  # int bounds slice faster than numpy scalars (the same views)
    # the trace's columns as arrays: a trace read into numpy columns builds no DataFrame (issue 14)
    rids = trace.labels("rid")
    sessions = trace.labels("session_id")
    turns = trace.column("turn", np.int64).tolist()
    prompt = trace.column("prompt_len", np.int64).tolist()
    output = trace.column("output_len", np.int64).tolist()
    ignore_eos = _is_bench_multiturn(trace.closed_loop)
    heartbeat_rows = ignore_eos and trace.closed_loop.enable_round_barrier
    # positional (no keyword dict per row): rid, pages, prompt_len, output_len, arrival_s (NaN:
    # SimRequest's default, set when it is sent), session, round, heartbeat, index, ignore_eos
    nan = math.nan
    reqs = [
        SimRequest(
            rids[i],
            ids[offsets[i] : offsets[i + 1]] if rows is None else LazyPages(rows, i),
            prompt[i],
            output[i],
            nan,
            sessions[i],
            turns[i],
            bool(heartbeat_rows and sessions[i] is None),
            i,
            ignore_eos,
        )
        for i in range(len(rids))
    ]
    if trace.has_column("max_new_tokens"):
        _client_values(trace.requests, reqs)
    return reqs


def _client_values(req, reqs: list[SimRequest]) -> None:
    """The trace's client columns (``traces.schema.CLIENT_COLUMNS``): a request's own
    ``max_new_tokens`` and ``ignore_eos``, where it sends them, as its client would."""
    max_new = req["max_new_tokens"].astype(object).where(req["max_new_tokens"].notna(), None).tolist()
    eos = req["ignore_eos"].astype(object).where(req["ignore_eos"].notna(), None).tolist()
    for r, m, e in zip(reqs, max_new, eos, strict=True):
        if m is not None:
            r.max_new_tokens = int(m)
        if e is not None:
            r.ignore_eos, r.eos_stated = bool(e), True


def _is_bench_multiturn(loop: object) -> bool:
    """``isinstance(loop, BenchMultiturnLoop)``, importing :mod:`traces.closed_loop` only for a
    trace that has a closed loop (an instance means the module is loaded; issue 14: start-up)."""
    if loop is None:
        return False
    from traces.closed_loop import BenchMultiturnLoop

    return isinstance(loop, BenchMultiturnLoop)


def client_mode(trace: Trace, cfg: SimConfig) -> str:
    """Which client rule serves ``trace`` under ``cfg`` ("open", "sequential", "bench_multiturn")."""
    loop = trace.closed_loop
    if loop is None:  # an open trace: traces.closed_loop need not load (issue 14)
        return "open"
    from traces.closed_loop import BenchMultiturnLoop, SequentialReplay

    if isinstance(loop, BenchMultiturnLoop):
        return "bench_multiturn"
    if isinstance(loop, SequentialReplay) and cfg.request_rate is None:
        return "sequential"
    return "open"


def offered_request_rate(trace: Trace, cfg: SimConfig) -> float | None:
    """The rate the report's "Total requests: N at R requests per second" line names.

    bench_multiturn: the sender's ``--request-rate`` (``cfg.request_rate`` overrides it);
    open loop: ``cfg.request_rate``, else requests over the scaled arrival span (2 decimals);
    sequential replay: None (there is no offered rate).
    """
    mode = client_mode(trace, cfg)
    if mode == "bench_multiturn":
        assert _is_bench_multiturn(trace.closed_loop)
        return float(cfg.request_rate if cfg.request_rate is not None else trace.closed_loop.request_rate)
    if mode == "sequential":
        return None
    if cfg.request_rate is not None:
        return float(cfg.request_rate)
    arr = trace.column("arrival_s", np.float64)
    arr = arr[np.isfinite(arr)]
    span = (float(arr.max() - arr.min()) * cfg.time_scale) if len(arr) else 0.0
    return round(len(trace) / span, 2) if span > 0 else None


def start_clients(
    env: simpy.Environment,
    server: Server,
    trace: Trace,
    cfg: SimConfig,
    requests: list[SimRequest] | None = None,
) -> simpy.Process:
    """Start the client side of a run; the returned process ends when every request completed.

    ``requests`` must be :func:`requests_from_trace` of ``trace`` (built with the server's resolved
    page size); when omitted it is built here with ``server.page_size`` (or ``cfg.page_size``, or 1).
    The process's value is a :class:`ClientStats`. A request the server never completes leaves the
    process pending, so a stuck run is visible as ``not process.triggered`` once ``env`` is empty.
    """
    if requests is None:
        page = getattr(server, "page_size", None) or cfg.page_size or 1
        requests = requests_from_trace(trace, int(page))
    if len(requests) != len(trace):
        raise ValueError(f"{len(requests)} requests for a trace of {len(trace)} rows")
    _check_timing(cfg)
    mode = client_mode(trace, cfg)
    if mode == "bench_multiturn":
        loop = trace.closed_loop
        assert _is_bench_multiturn(loop)
        if cfg.request_rate is not None:
            loop = dataclasses.replace(loop, request_rate=float(cfg.request_rate))
        return env.process(_bench_multiturn(env, server, trace, loop, requests))
    if mode == "sequential":
        return env.process(_sequential(env, server, requests, cfg.think_time_s))
    return env.process(_open_loop(env, server, trace, cfg, requests))


def _check_timing(cfg: SimConfig) -> None:
    if not (cfg.time_scale >= 0 and math.isfinite(cfg.time_scale)):
        raise ConfigError(f"--time-scale must be a finite number >= 0, got {cfg.time_scale}")
    # inf: every request at time 0, as SGLang's bench_serving.py treats --request-rate inf.
    if cfg.request_rate is not None and not cfg.request_rate > 0:
        raise ConfigError(f"--request-rate must be > 0 (inf: all at once), got {cfg.request_rate}")
    if not (cfg.think_time_s >= 0 and math.isfinite(cfg.think_time_s)):
        raise ConfigError(f"--think-time must be a finite number >= 0, got {cfg.think_time_s}")


class _Tracker:
    """Counts completions and fires ``all_done`` when the last one arrives."""

    def __init__(self, env: simpy.Environment, stats: ClientStats) -> None:
        self.env = env
        self.stats = stats
        self.all_done = env.event()
        if stats.total == 0:
            self.all_done.succeed()
        self._done_cb = self._done  # one bound method for every request, not one each

    def send(self, server: Server, req: SimRequest) -> simpy.Event:
        req.arrival_s = self.env.now
        self.stats.submitted += 1
        self.stats.heartbeats += int(req.heartbeat)
        done = server.submit(req)
        done.callbacks.append(self._done_cb)
        return done

    def _done(self, _event: simpy.Event) -> None:
        self.stats.completed += 1
        if self.stats.completed == self.stats.total:
            self.stats.end_s = self.env.now
            self.all_done.succeed()


# --- open loop ---------------------------------------------------------------------------------


def open_loop_schedule(trace: Trace, cfg: SimConfig) -> tuple[np.ndarray, np.ndarray]:
    """(own send time of every row, whether the row waits for its parent) for the open loop.

    Own times are ``(arrival_s - first arrival) * time_scale``, or Poisson times at
    ``cfg.request_rate`` drawn from ``numpy.random.default_rng(cfg.seed)``; NaN where unknown.
    """
    n = len(trace)
    arrival = trace.column("arrival_s", np.float64)
    parent = trace.column("parent", np.int64)
    if cfg.request_rate is not None:
        gaps = np.random.default_rng(cfg.seed).exponential(1.0 / cfg.request_rate, size=n)
        own = np.zeros(n)
        if n > 1:
            np.cumsum(gaps[:-1], out=own[1:])
    else:
        finite = np.isfinite(arrival)
        first = float(arrival[finite].min()) if finite.any() else 0.0
        own = (arrival - first) * cfg.time_scale
    waits = (parent >= 0) & ((cfg.think_time_s > 0) | np.isnan(own))
    orphan = np.flatnonzero(np.isnan(own) & ~waits)
    if len(orphan):
        i = int(orphan[0])
        raise ConfigError(
            f"trace row {i} (rid {trace.labels('rid')[i]}) has no arrival time and no parent turn "
            f"({len(orphan)} such rows); give --request-rate to time them"
        )
    return own, waits


def _open_loop(
    env: simpy.Environment, server: Server, trace: Trace, cfg: SimConfig, reqs: list[SimRequest]
) -> Generator[simpy.Event, Any, ClientStats]:
    own, waits = open_loop_schedule(trace, cfg)
    parent = trace.column("parent", np.int64)
    reqs = list(reqs)  # its own list, a slot cleared once sent: a finished request can be freed
    stats = ClientStats("open", len(reqs), start_s=env.now)
    tracker = _Tracker(env, stats)
    think = cfg.think_time_s
    children: dict[int, list[int]] = {}
    for c in np.flatnonzero(waits).tolist():
        children.setdefault(int(parent[c]), []).append(c)
    t0 = env.now

    def submit(i: int) -> None:
        req, reqs[i] = reqs[i], None
        done = tracker.send(server, req)
        kids = children.get(i)
        if kids:
            done.callbacks.append(lambda _ev, kids=kids: release(kids))

    # A waiting turn goes at max(own time, parent finish + think time). When its own time is the
    # later one, the loop below sends it at that time, as it sends a root: at exactly that time
    # (a parent's finish can differ by rounding between two exact ways of running the same
    # schedule, fast-forward on or off, and so could a time derived from it), and in row order
    # with the other sends of that instant.
    # per-row flags as bytes: a scalar read or write of a numpy array costs a numpy scalar
    waiting = bytearray(waits.tobytes())  # waits is bool: one byte, 0 or 1, per row
    released = bytearray(len(reqs))  # the parent finished in time for the own time
    passed = bytearray(len(reqs))  # the loop is past the turn's own time

    def release(kids: list[int]) -> None:
        for c in kids:
            if not passed[c] and not math.isnan(own[c]) and env.now + think <= t0 + float(own[c]):
                released[c] = 1  # the loop sends it at its own time
            else:
                env.timeout(think).callbacks.append(lambda _ev, c=c: submit(c))

    timed = np.flatnonzero(~np.isnan(own))  # roots, and waiting turns that have an own time
    timed = timed[np.argsort(own[timed], kind="stable")]
    expect = getattr(server, "expect_arrival", None)  # optional: lets the server plan its jumps
    for i, t in _in_chunks(timed, own[timed]):
        delay = t0 + t - env.now
        if delay > 0:
            if expect is not None:
                expect(env.now + delay)  # the float simpy will schedule at
            yield env.timeout(delay)
        passed[i] = 1
        if not waiting[i] or released[i]:
            submit(i)
    if expect is not None:
        expect(math.inf)
    yield tracker.all_done
    return stats


def _in_chunks(rows: np.ndarray, times: np.ndarray, chunk: int = 1 << 16) -> Iterator[tuple[int, float]]:
    """``zip(rows.tolist(), times.tolist())`` a chunk at a time: the whole lists of a
    million-request trace would hold ~70 MB while the requests arrive."""
    for lo in range(0, len(rows), chunk):
        yield from zip(rows[lo : lo + chunk].tolist(), times[lo : lo + chunk].tolist(), strict=True)


# --- sequential replay -------------------------------------------------------------------------


def _sequential(
    env: simpy.Environment, server: Server, reqs: list[SimRequest], think_s: float
) -> Generator[simpy.Event, Any, ClientStats]:
    stats = ClientStats("sequential", len(reqs), start_s=env.now)
    tracker = _Tracker(env, stats)
    for k, req in enumerate(reqs):
        if k and think_s > 0:
            yield env.timeout(think_s)
        yield tracker.send(server, req)
    yield tracker.all_done
    return stats


# --- bench_multiturn ---------------------------------------------------------------------------


def _bench_multiturn(
    env: simpy.Environment, server: Server, trace: Trace, loop: BenchMultiturnLoop, reqs: list[SimRequest]
) -> Generator[simpy.Event, Any, ClientStats]:
    """bench_multiturn.py's ``request_sender`` and ``response_handler`` threads as two processes.

    Sender (``request_loop``): if ``sent - completed < max_parallel``, pop one ready request
    (``random.randrange(len)`` for "random", the oldest for "fifo"; nothing is drawn when the
    queue is empty) and send it; otherwise sleep ``poll_interval_s`` and retry without the pacing
    sleep. After every launch attempt it stops if all requests have returned (``pbar.n ==
    pbar.total``), else sleeps ``expovariate(rate)`` or ``uniform(0, 2 / rate)``. All draws come from
    ``loop.sender_rng()`` in the script's order, so the same completion order gives the same sends.

    Response handler: takes responses in arrival order from a queue (``response_queue``), counts
    ``completed`` and queues the client's next round; without the barrier it goes straight to the
    ready queue. With the barrier it is held until ``clients_per_round[r]`` responses of round r
    arrived; then the handler sends that round's heartbeat row *synchronously* (it blocks until
    the heartbeat finished, as ``requests.post`` does), optionally flushes the cache, sleeps
    ``barrier_sleep_s`` (10 s) and releases the held requests in response order. While it blocks,
    later responses wait in the queue and ``completed`` does not advance, as in the script.

    Heartbeats never enter ``sent``/``completed`` or the progress count (the script posts them
    outside ``handle_request``), and :class:`~simulator.engine.metrics.Recorder` excludes them.

    Deviation: the script drops a client whose request failed (and, with the barrier, would then
    wait forever); here an aborted request still releases its client's next row, so the run ends.
    The aborted request itself is excluded from the metrics, as the script excludes failures.
    """
    clients = _BenchMultiturnClients(env, server, trace, loop, reqs)
    yield env.process(clients.sender()) & env.process(clients.handler())
    yield clients.tracker.all_done
    return clients.stats


class _BenchMultiturnClients:
    """The state the script's two threads share (``sent``, ``completed``, the ready queue) and
    the two processes (:func:`_bench_multiturn` says what they do)."""

    def __init__(
        self,
        env: simpy.Environment,
        server: Server,
        trace: Trace,
        loop: BenchMultiturnLoop,
        reqs: list[SimRequest],
    ) -> None:
        self.env, self.server, self.loop, self.reqs = env, server, loop, reqs
        self.rng = loop.sender_rng()
        self.heartbeat_of: dict[int, int] = {}
        self.next_row: dict[int, int] = {}
        self.ready: list[int] = []
        parent = trace.column("parent", np.int64)
        for i, req in enumerate(reqs):
            if req.heartbeat:
                self.heartbeat_of[req.round] = i
            elif parent[i] >= 0:
                self.next_row[int(parent[i])] = i
            elif req.round == 0:
                self.ready.append(i)
        self.total = len(reqs) - len(self.heartbeat_of)  # pbar.total
        # Responses each barrier waits for: clients_per_round, counted from the rows actually
        # present so that a truncated trace (``--limit``) cannot leave the barrier waiting for rows
        # it lacks.
        rounds = np.array([r.round for r in reqs if not r.heartbeat], dtype=np.int64)
        self.per_round = np.bincount(rounds).tolist()
        self.stats = ClientStats("bench_multiturn", len(reqs), start_s=env.now)
        self.tracker = _Tracker(env, self.stats)
        self.responses = simpy.Store(env)
        self.sent = self.completed = self.returned = 0
        self.all_returned = env.event()
        self.wake: simpy.Event | None = None  # --request-rate inf: the sender waits for a response
        if self.total == 0:
            self.all_returned.succeed()
        self.flush: Callable[[], Any] | None = None
        if loop.enable_round_barrier and loop.flush_between_rounds:
            self.flush = getattr(server, "flush_cache", None)
            if self.flush is None:
                raise ConfigError("--flush-between-rounds needs a server model with flush_cache()")

    def on_response(self, event: simpy.Event) -> None:
        self.returned += 1  # pbar.update(1) inside the request function
        self.responses.put(event.value)
        if self.returned == self.total:
            self.all_returned.succeed()

    def sender(self) -> Generator[simpy.Event, Any, None]:
        """``request_loop``."""
        env, loop, ready, rng = self.env, self.loop, self.ready, self.rng
        unpaced = math.isinf(loop.request_rate)
        while True:
            launched = False
            if self.sent - self.completed < loop.max_parallel:
                if ready:
                    k = rng.randrange(len(ready)) if loop.ready_queue_policy == "random" else 0
                    i = ready.pop(k)
                    self.tracker.send(self.server, self.reqs[i]).callbacks.append(self.on_response)
                    self.sent += 1
                    launched = True
            else:
                yield env.timeout(loop.poll_interval_s)
                continue
            if self.returned == self.total:
                return
            if unpaced:
                yield from self._unpaced_wait(launched)
                continue
            yield env.timeout(_pacing(rng, loop)) | self.all_returned
            if self.all_returned.triggered:
                # The script would still sleep out this interval, try one more pop from an empty
                # queue and then stop; nothing of that is observable, so stop now.
                return

    def _unpaced_wait(self, launched: bool) -> Generator[simpy.Event, Any, None]:
        """``--request-rate inf``: no pacing, as in SGLang's benchmarks (bench_serving.py
        ``get_request`` skips the sleep; bench_multiturn.py sleeps ``expovariate(inf)`` = 0). The
        draw is still made, keeping the script's random sequence. After a launch the sender
        tries again at once; with nothing ready it waits for the next response instead of
        polling at zero delay (which would never let simulated time move)."""
        _pacing(self.rng, self.loop)
        if launched:
            return
        self.wake = self.env.event()
        yield self.wake | self.all_returned

    def _notify(self) -> None:
        if self.wake is not None and not self.wake.triggered:
            self.wake.succeed()

    def handler(self) -> Generator[simpy.Event, Any, None]:
        """``response_handler``, with the round barrier."""
        loop, barrier = self.loop, self.loop.enable_round_barrier
        held: list[int] = []
        barrier_round = barrier_done = handled = 0
        while handled < self.total:
            req = yield self.responses.get()
            handled += 1
            self.completed += 1
            nxt = self.next_row.get(req.index)
            if nxt is not None:
                (held if barrier else self.ready).append(nxt)
            self._notify()
            if barrier and barrier_round < len(self.per_round):
                barrier_done += 1
                if barrier_done == self.per_round[barrier_round]:
                    hb = self.heartbeat_of.get(barrier_round)
                    if hb is not None:
                        yield self.tracker.send(self.server, self.reqs[hb])
                    if self.flush is not None:
                        self.flush()
                    yield self.env.timeout(loop.barrier_sleep_s)
                    self.ready.extend(held)
                    held = []
                    self._notify()
                    barrier_round += 1
                    barrier_done = 0


def _pacing(rng: Any, loop: BenchMultiturnLoop) -> float:
    """The sleep after a launch attempt, drawn exactly as the script draws it."""
    if loop.distribution == "poisson":
        return rng.expovariate(loop.request_rate)
    if loop.distribution == "uniform":
        return rng.uniform(0, 2 * (1.0 / loop.request_rate if loop.request_rate > 0 else 1.0))
    raise ConfigError(f"unknown bench_multiturn distribution {loop.distribution!r}")
