"""Big traces: page keys computed per request on demand give the same runs as whole-trace keys."""

from __future__ import annotations

import numpy as np
import pytest

import traces.pages as pages_mod
from simulator import SimConfig, run_config
from simulator.cli.common import DEFAULT_TRACE
from traces import load_trace
from traces.pages import LazyPages, page_keys, row_page_keys


@pytest.fixture
def lazy_everywhere(monkeypatch):
    """Every hash-block trace counts as big, and chunks are small (many chunk boundaries)."""
    monkeypatch.setattr(pages_mod, "LAZY_PAGES_ABOVE", 0)
    monkeypatch.setattr(pages_mod, "_CHUNK_PAGES", 1000)
    monkeypatch.setattr(pages_mod, "_CHUNKS_KEPT", 2)


def _equal_keys(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal exactly where equal: the two key sets name the same pages."""
    _, ia = np.unique(a, return_inverse=True)
    _, ib = np.unique(b, return_inverse=True)
    # the same partition of positions: the map a-key -> b-key is a bijection
    pairs = np.unique(np.stack([ia.ravel(), ib.ravel()]), axis=1)
    return len(np.unique(pairs[0])) == pairs.shape[1] == len(np.unique(pairs[1]))


@pytest.mark.parametrize("page_size", [1, 16, 64, 300])
def test_row_keys_name_the_same_pages(lazy_everywhere, page_size):
    trace = load_trace(DEFAULT_TRACE)
    rows = row_page_keys(trace.content, page_size)
    assert rows is not None
    offsets, keys = page_keys(trace.content, page_size)
    lazy = np.concatenate([rows.row(i) for i in range(len(trace))])
    assert len(lazy) == len(keys)
    assert all(rows.row_len(i) == offsets[i + 1] - offsets[i] for i in range(len(trace)))
    assert _equal_keys(keys, lazy)
    p = LazyPages(rows, 5)
    assert len(p) == offsets[6] - offsets[5]
    assert np.array_equal(p[:3], rows.row(5)[:3])


def test_small_traces_keep_whole_arrays():
    trace = load_trace(DEFAULT_TRACE)
    assert row_page_keys(trace.content, 64) is None


@pytest.mark.parametrize(
    "cfg",
    [
        SimConfig(page_size=64, tp=8),
        SimConfig(page_size=16, tp=8, tombstone="legacy", max_total_tokens=60_000),
    ],
    ids=["unified", "legacy-small-pool"],
)
def test_lazy_pages_give_the_same_run(monkeypatch, cfg):
    trace = load_trace(DEFAULT_TRACE, limit=400)
    whole = run_config(trace, cfg)
    monkeypatch.setattr(pages_mod, "LAZY_PAGES_ABOVE", 0)
    monkeypatch.setattr(pages_mod, "_CHUNK_PAGES", 1000)
    monkeypatch.setattr(pages_mod, "_CHUNKS_KEPT", 2)
    lazy = run_config(load_trace(DEFAULT_TRACE, limit=400), cfg)
    assert lazy.equals(whole)


def _cache_replay(*extra: str) -> str:
    from typer.testing import CliRunner

    from simulator.cli.main import app

    args = ["cache-replay", str(DEFAULT_TRACE), "--page-size", "64", "--limit", "300", "--json"]
    res = CliRunner().invoke(app, [*args, *extra])
    assert res.exit_code in (0, 3), res.output
    return res.output


@pytest.mark.parametrize("pools", [(), ("--full-tokens", "9000", "--swa-tokens", "3000", "--window", "128")])
def test_cache_replay_lazy_pages_and_streamed_records(monkeypatch, pools):
    """Lazy page keys and records printed as they come give the same output, aborts included."""
    whole = _cache_replay(*pools, "--max-abort-fraction", "1")
    monkeypatch.setattr(pages_mod, "LAZY_PAGES_ABOVE", 0)
    monkeypatch.setattr(pages_mod, "_CHUNK_PAGES", 1000)
    lazy = _cache_replay(*pools, "--max-abort-fraction", "1")
    assert lazy == whole
    assert '"summary"' in lazy.splitlines()[-1]


def test_replay_summary_same_with_and_without_records():
    """The tally behind a streamed replay gives the summary the kept records give."""
    from simulator.cache_replay import CacheReplayConfig, replay
    from simulator.cli.cache_replay_cmd import workload_from_trace

    work = workload_from_trace(DEFAULT_TRACE, 64, 200)
    cfg = CacheReplayConfig(page_size=64, full_tokens=9000, swa_tokens=3000, window=128)
    kept = replay(work, cfg)
    seen: list[dict] = []
    streamed = replay(work, cfg, seen.append)
    assert streamed.records == [] and seen == kept.records
    assert streamed.summary == kept.summary
    assert kept.summary["aborted"] > 0


def test_packed_prefill_batches_give_the_same_frames(monkeypatch):
    """Prefill batches packed into arrays as they pile up give the same frames and summary."""
    import simulator.engine.metrics as metrics_mod

    trace = load_trace(DEFAULT_TRACE, limit=300)
    cfg = SimConfig(page_size=64, tp=8)
    plain = run_config(trace, cfg)
    monkeypatch.setattr(metrics_mod, "_PREFILL_PACK", 7)
    packed = run_config(trace, cfg)
    assert plain.summary["prefill_batches"] > 7 * 3
    assert packed.equals(plain)
    assert packed.frames["prefill_batches"]["extend_tokens"].dtype == np.int64
