"""``kvplan gpu-replay``: an op log executed on SGLang-shaped pools (gpu_replay/oplog_replay.py).

The replay must reach the op log's page state after every step (the simulator's own replay,
``simulator.oplog.replay_ops``, is the expectation), write every allocated page, release freed
pages, keep the data of live pages through SWA remaps and write-back, and catch a page whose data
was lost. CPU torch runs everything here; the ``gpu`` test repeats the replay on CUDA.
"""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from typer.testing import CliRunner  # noqa: E402

from gpu_replay.oplog_replay import OpLogReplay, ReplayCheckError, ReplayOptions  # noqa: E402
from simulator.cli.main import app  # noqa: E402
from simulator.memory_ops import MemoryOp, OpKind  # noqa: E402
from simulator.oplog import read_op_log, replay_ops, write_op_log  # noqa: E402

RUN = ["run", "--limit", "20", "--tp", "2", "--page-size", "64", "--max-total-tokens", "30000"]


@pytest.fixture(scope="module")
def oplog(tmp_path_factory):
    """A small recorded run of gpt-oss-120b at TP 2 whose pools evict, tombstone and remap."""
    path = tmp_path_factory.mktemp("gpu_replay") / "small.npz"
    res = CliRunner().invoke(
        app, [*RUN, "--record-ops", str(path), "--max-abort-fraction", "1", "--no-progress"]
    )
    assert path.exists(), res.output
    log = read_op_log(path)
    kinds = {op.kind for op in log.ops}
    assert {OpKind.ALLOC, OpKind.EVICT, OpKind.REMAP_SWA, OpKind.SWA_WINDOW_FREE} <= kinds
    return path


def _replay(path, **opts) -> OpLogReplay:
    return OpLogReplay(read_op_log(path), ReplayOptions(layers=1, **opts))


def test_replay_reaches_the_op_logs_page_state_after_every_step(oplog):
    expect = {s.step: s for s in replay_ops(read_op_log(oplog))}
    replay = _replay(oplog, verify="every", check_every=10)
    seen = []

    def on_step(step):
        want = expect[step]
        pages = replay.ex.pages
        assert np.array_equal(pages.full.all_free(), want.full_free_ids), step
        assert np.array_equal(pages.swa.all_free(), want.swa_free_ids), step
        seen.append(step)

    rows = replay.run(on_step=on_step)
    assert sorted(seen) == sorted(expect) and replay.checks > 10
    log = read_op_log(oplog)
    allocated = sum(len(op.full) for op in log.ops if op.kind == OpKind.ALLOC)
    assert sum(r.alloc_full_pages for r in rows) == allocated == sum(r.alloc_swa_pages for r in rows)
    per_page = sum(p.bytes_per_page for p in replay.pools.values())
    assert sum(r.written_bytes for r in rows) == allocated * per_page
    assert all(r.write_s > 0 for r in rows if r.alloc_full_pages)
    assert {r.step for r in rows} >= {s.step for s in log.steps}


def test_allocations_write_their_pages_and_frees_release_them(oplog):
    replay = _replay(oplog, verify="end")
    replay.run()
    full = replay.pools["full"]
    live = np.flatnonzero(replay.live.full)
    assert len(live) and (full.serial[live] > 0).all()
    # every live page holds its own allocation's tag (read back, not trusted)
    assert len(full.bad_pages(live)) == 0
    # a freed page is free in the allocator and not live here
    free = replay.ex.pages.full.all_free()
    assert not replay.live.full[free].any()
    # corrupt one live page in the last layer: the check names it
    victim = int(live[len(live) // 2])
    page = full.geo.page_size
    full.dev.v[-1][victim * page + page - 1].fill_(-3.0)
    with pytest.raises(ReplayCheckError, match=f"live full pages \\[{victim}\\]"):
        replay.check(-1)


def test_a_page_counted_live_but_free_in_the_allocator_fails_the_check(oplog):
    replay = _replay(oplog, verify="none")
    replay.run()
    free = replay.ex.pages.swa.all_free()
    replay.live.swa[free[0]] = True
    with pytest.raises(ReplayCheckError, match="SWA free pages"):
        replay.check(-1)


def test_swa_remaps_keep_the_data_a_full_page_maps_to(oplog):
    replay = _replay(oplog, verify="none")
    replay.run()
    assert replay.replayed["REMAP_SWA"] >= 1
    replay.check(-1)  # the remapped FULL pages see their SWA data
    mapped = np.flatnonzero(replay.live.swa_serial_of_full)
    assert len(mapped) >= 2
    a, b = (int(x) for x in mapped[:2])
    m = replay.ex.pages.full_to_swa
    m[a], m[b] = m[b], m[a]  # a remap that swapped two peers
    with pytest.raises(ReplayCheckError, match="map to SWA data of another allocation"):
        replay.check(-1)


@pytest.mark.parametrize(
    ("layout", "backend"),
    [("layer_first", "kernel"), ("page_first", "kernel"), ("page_first_direct", "direct")],
)
def test_write_back_moves_evicted_pages_to_the_host_intact(oplog, layout, backend):
    replay = _replay(oplog, verify="end", write_back=True, layout=layout, io_backend=backend)
    rows = replay.run()
    log = read_op_log(oplog)
    evicted_full = sum(len(op.full) for op in log.ops if op.kind == OpKind.EVICT and op.reason == "evict")
    assert sum(r.backup_pages for r in rows) >= evicted_full > 0
    for pool in replay.pools.values():
        used = np.flatnonzero(pool.host_serial)
        assert len(used) and len(pool.bad_host_pages(used)) == 0
    host = replay.pools["full"].host
    used = int(np.flatnonzero(replay.pools["full"].host_serial)[0])
    view = host.layer_view("k", 0)
    page = replay.pools["full"].geo.page_size
    (view[used] if view.dim() == 4 else view[used * page]).fill_(-5.0)
    with pytest.raises(ReplayCheckError, match="backed-up full host pages"):
        replay.check(-1)


def test_hicache_records_are_counted_not_replayed(oplog, tmp_path):
    log = read_op_log(oplog)
    last = log.ops[-1].step
    extra = MemoryOp(OpKind.BACKUP_D2H, last, "r0", np.array([1], dtype=np.int64))
    path = write_op_log(tmp_path / "hic.npz", log.header, [*log.ops, extra], log.steps)
    replay = _replay(path, verify="end")
    rows = replay.run()
    assert replay.not_replayed == {"BACKUP_D2H": 1}
    assert sum(r.not_replayed for r in rows) == 1


def test_cli_writes_the_table_and_summary(oplog, tmp_path):
    out, summary = tmp_path / "steps.csv", tmp_path / "summary.json"
    args = ["gpu-replay", str(oplog), "--tp", "2", "--device", "cpu", "--layers", "1", "--write-back"]
    res = CliRunner().invoke(app, [*args, "--out", str(out), "--summary", str(summary), "--json"])
    assert res.exit_code == 0, res.output
    printed = json.loads(res.output)
    assert "kvplan_version" in printed.pop("provenance")  # printed only, not in --summary's file
    assert json.loads(summary.read_text()) == printed
    with out.open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == printed["steps"] and {"step", "write_s", "backup_s", "mem_s"} <= set(rows[0])
    assert printed["pools"]["full"]["layers"] == 1 and printed["layers_replayed_of"]["full"] == 18
    assert printed["backup_pages"] > 0 and printed["checks"] == 1


def test_cli_repeats_and_isolated_calls(oplog, tmp_path):
    """--repeats N: a checked warm-up, then N timed replays with a table each (OUT-r{i}), the
    per-repeat totals in the summary; --isolate-calls reaches the replay options."""
    out = tmp_path / "steps.csv"
    args = ["gpu-replay", str(oplog), "--tp", "2", "--device", "cpu", "--layers", "1", "--write-back"]
    res = CliRunner().invoke(app, [*args, "--out", str(out), "--repeats", "2", "--isolate-calls", "--json"])
    assert res.exit_code == 0, res.output
    printed = json.loads(res.output)
    assert printed["options"]["isolate_calls"] is True and printed["checks"] == 1
    assert [r["table"] for r in printed["repeats"]] == [str(tmp_path / f"steps-r{i}.csv") for i in (0, 1)]
    assert not out.exists()
    for i, rep in enumerate(printed["repeats"]):
        with (tmp_path / f"steps-r{i}.csv").open() as f:
            rows = list(csv.DictReader(f))
        assert len(rows) == printed["steps"]
        assert sum(int(r["backup_pages"]) for r in rows) == printed["backup_pages"] and rep["backup_s"] > 0
    res = CliRunner().invoke(app, [*args, "--out", str(out), "--repeats", "0"])
    assert res.exit_code == 1 and "--repeats" in res.output


def test_cli_refuses_a_log_of_another_model_and_bad_flags(oplog, tmp_path):
    out = str(tmp_path / "x.csv")
    base = ["gpu-replay", str(oplog), "--device", "cpu", "--out", out]
    res = CliRunner().invoke(app, [*base, "--tp", "1"])
    assert res.exit_code == 1 and "recorded for gpt-oss-120b at TP 2" in res.output
    res = CliRunner().invoke(app, [*base, "--tp", "2", "--layout", "page_first", "--io-backend", "direct"])
    assert res.exit_code == 1 and "page_first_direct" in res.output
    res = CliRunner().invoke(app, [*base, "--tp", "2", "--impl", "nope"])
    assert res.exit_code == 1 and "--impl" in res.output
    if not torch.cuda.is_available():
        res = CliRunner().invoke(app, ["gpu-replay", str(oplog), "--tp", "2", "--out", out])
        assert res.exit_code == 1 and "no CUDA device" in res.output


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("impl", ["reference", "triton", "cuda"])
def test_replay_on_cuda(oplog, impl):
    pytest.importorskip("triton") if impl == "triton" else None
    replay = _replay(oplog, device="cuda", verify="every", check_every=5, write_back=True, impl=impl)
    try:
        rows = replay.run()
    finally:
        replay.release()
    assert replay.checks > 5 and sum(r.backup_pages for r in rows) > 0
    assert all(r.write_s > 0 for r in rows if r.alloc_full_pages)
