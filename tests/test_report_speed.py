"""The faster report and start-up paths (issue 14) give the former answers, bit for bit."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from simulator.engine.bench_summary import _mean
from simulator.engine.request import SimRequest
from simulator.engine.rounds import majority_round
from traces.gc_pause import collector_paused


def _bincount_majority(batch: list) -> tuple[int, float]:
    """The former majority_round: np.bincount of the non-heartbeat rounds."""
    rounds = [r.round for r in batch if not r.heartbeat]
    if not rounds:
        return -1, 0.0
    if len(set(rounds)) == 1:
        return rounds[0], 1.0
    counts = np.bincount(np.asarray(rounds, dtype=np.int64))
    top = int(counts.argmax())
    return top, float(counts[top]) / len(rounds)


class _Fake:
    def __init__(self, rnd: int, heartbeat: bool) -> None:
        self.round, self.heartbeat = rnd, heartbeat


@pytest.mark.parametrize("seed", range(40))
def test_majority_round_counts_as_bincount_did(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 40))
    rounds = int(rng.integers(1, 6))
    batch = []
    for _ in range(n):
        rnd, hb = int(rng.integers(0, rounds)), bool(rng.random() < 0.15)
        if rng.random() < 0.2:
            batch.append(_Fake(rnd, hb))  # any object with round and heartbeat
        else:
            batch.append(SimRequest("x", np.zeros(0, np.int64), 1, 1, round=rnd, heartbeat=hb))
    got, want = majority_round(batch), _bincount_majority(batch)
    assert got == want and type(got[0]) is type(want[0]) and type(got[1]) is float


def _mean_masked(v: np.ndarray) -> float | None:
    v = v[np.isfinite(v)]
    return float(v.mean()) if len(v) else None


def test_mean_of_a_finite_column_is_the_masked_mean() -> None:
    rng = np.random.default_rng(0)
    for n in (1, 7, 8, 9, 129, 8193, 100_003):
        v = rng.random(n + 3) * 1e3
        for view in (v, v[3:], v[1:-1]):
            assert _mean(view) == _mean_masked(view)
        v[n // 2] = np.nan
        assert _mean(v) == _mean_masked(v)


def test_collector_paused_restores_the_collector() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError), collector_paused():
        raise ValueError
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()  # a caller's own pause is left alone
    finally:
        gc.enable()


def test_cli_turns_the_collector_back_on() -> None:
    from typer.testing import CliRunner

    from simulator.cli.main import app

    states = []
    import simulator.cli.lazy as lazy

    real = lazy.LazyCommands.__getitem__

    def spy(self, name):  # the command's module is imported with the collector off
        states.append(gc.isenabled())
        return real(self, name)

    lazy.LazyCommands.__getitem__ = spy
    try:
        result = CliRunner().invoke(app, ["trace", "--help"])
    finally:
        lazy.LazyCommands.__getitem__ = real
    assert result.exit_code == 0, result.output
    assert states and not any(states)
    assert gc.isenabled()
    assert CliRunner().invoke(app, ["--help"]).exit_code == 0
    assert gc.isenabled()


def test_packed_prefill_batches_are_the_former_array() -> None:
    from simulator.engine.metrics import _PREFILL_FIELDS, Recorder

    rec = Recorder()
    rng = np.random.default_rng(1)
    rows = []
    for k in range(300):
        sim = SimRequest(str(k), np.zeros(0, np.int64), 1, 1, round=int(rng.integers(0, 3)))
        t0 = float(rng.random() * 100)
        args = (t0, t0 + 0.25, [sim], int(rng.integers(1, 9000)), np.int64(rng.integers(0, 900)))
        more = (int(rng.integers(0, 2**40)), np.int64(7), 3, int(rng.integers(0, 50)))
        rec.on_prefill_batch(*args, *more)
        rows.append((t0, t0 + 0.25, 1, *args[3:], *more, majority_round([sim])[0]))
    rec._pack_prefill()
    want = np.array(rows, dtype=np.float64).reshape(-1, _PREFILL_FIELDS)
    got = np.concatenate(rec._prefill_packed)
    assert got.dtype == want.dtype and np.array_equal(got, want)


def test_finder_memo_gives_the_module_hashes() -> None:
    import simulator.compiled_modules as cm

    memo: dict[str, str] = {}
    assert [cm.module_hash(n, memo) for n in cm.COMPILED_MODULES] == [
        cm.module_hash(n) for n in cm.COMPILED_MODULES
    ]
    assert memo.keys() >= set(cm.COMPILED_MODULES)


@pytest.mark.parametrize("seed", range(20))
def test_page_keys_loop_writes_the_numpy_keys(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled build's loop (run here as Python on small blocks) and numpy's passes agree."""
    import traces.page_fill as pf

    rng = np.random.default_rng(seed)
    nb = int(rng.integers(0, 40))
    n, base = rng.integers(1, 7, nb), rng.integers(0, 2**50, nb)
    page_size = int(rng.choice([1, 16, 64, 4096]))
    monkeypatch.setattr(pf, "COMPILED", False)
    want = pf.block_page_keys(base, n, page_size)
    keys = np.empty(int(n.sum()), dtype=np.int64)
    pf.fill_keys(keys, base, n, page_size)
    assert want.dtype == np.int64 and np.array_equal(keys, want)
    monkeypatch.setattr(pf, "COMPILED", True)
    assert np.array_equal(pf.block_page_keys(base, n, page_size), want)
