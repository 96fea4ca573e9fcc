"""SM partitions by green contexts (``gpu_replay.green_ctx``) and the partitioned load benchmark
(``gpu_replay.scatter_green``, tables in ``gpu_replay.green_plan``). CPU: the plan, the hidden
fraction arithmetic, the tables and verdicts on synthetic runs, the dry run end to end (module and
device script), the resource parsing and the refusal path. GPU: the loaded and backed-up bytes
are right under a partition, in every order, with compute running on the other side."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from gpu_replay import green_plan  # noqa: E402
from gpu_replay.green_ctx import make_partition, sm_count_of, torch_support  # noqa: E402
from gpu_replay.green_plan import Plan, hidden, overlap_row, synthetic_result, verdicts  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def test_hidden_fraction_is_the_removed_share_of_the_load_clipped():
    assert hidden(1.0, 2.0, 2.0) == 1.0  # fully behind the compute
    assert hidden(1.0, 2.0, 3.0) == 0.0  # serial
    assert hidden(1.0, 2.0, 2.5) == pytest.approx(0.5)
    assert hidden(1.0, 2.0, 3.5) == 0.0  # slower than serial clips at 0
    assert hidden(1.0, 2.0, 1.5) == 1.0  # faster than the compute alone clips at 1
    assert hidden(0.0, 1.0, 1.0) == 0.0


def test_two_hidden_fractions_charge_the_partition_slowdown_only_once():
    row = overlap_row("split", 16, "h2d", "load_first", 4096, 1.0, 1.0, 1.0, 1.2, 1.3)
    assert row["hidden_full"] == pytest.approx(0.7)  # (1.0 + 1.0 - 1.3) / 1.0
    assert row["hidden_part"] == pytest.approx(0.9)  # (1.2 + 1.0 - 1.3) / 1.0
    assert row["compute_over_load"] == pytest.approx(1.0)


def test_plan_covers_baseline_and_every_k_mode_direction_order():
    plan = Plan()
    cells = plan.overlap_cells(4096)
    per_k = len(plan.modes) * len(plan.directions) * len(plan.orders)
    assert len(cells) == len(plan.directions) * len(plan.orders) + len(plan.ks) * per_k
    assert cells[0][:2] == ("none", 0)
    assert {c[1] for c in cells} == {0, *plan.ks}
    assert len(set(cells)) == len(cells)
    assert set(plan.prefixes) >= set(plan.overlap_prefixes)


def test_synthetic_run_fills_tables_and_verdicts():
    plan = Plan(ks=(8, 24))
    res = synthetic_result(plan)
    assert len(res["curve"]) == 3 * 2 * len(plan.prefixes)
    assert len(res["overlap"]) == sum(len(plan.overlap_cells(p)) for p in plan.overlap_prefixes) * 3
    curve = green_plan.curve_table(res)
    assert curve.count("\n") == 1 + 3  # title, header, baseline + two ks
    table = green_plan.overlap_table(res)
    assert "hidden_full" in table and "pipelined" in table and "plain_load" in table
    v = verdicts(res)
    assert len(v) == 2 * 3 + 2 * 2 * 2 * 3  # baseline: directions x orders; then ks x modes x ...
    for x in v:
        assert x["meets_both"] == (x["pct_4k_alone"] >= 90 and x["hidden_full_min"] >= 0.9)
        assert x["hidden_part_min"] >= x["hidden_full_min"]  # partition compute is never faster here
    assert "cells meeting both targets" in green_plan.verdict_lines(res)


def test_verdict_needs_both_targets():
    base = {"mode": "split", "k": 8, "direction": "h2d", "order": "load_first", "prefix": 4096}
    rows = []
    for ratio, both in ((1.0, 1.05), (1.5, 1.55)):
        r = overlap_row("split", 8, "h2d", "load_first", 4096, ratio, 1.0, ratio, ratio, both)
        rows.append(base | r | {"pct_alone": 91.0, "pct_overlapped": 88.0})
    (v,) = verdicts({"overlap": rows})
    assert v["meets_both"] and v["hidden_full_min"] == pytest.approx(0.95)
    rows[1]["pct_alone"] = 89.0
    (v,) = verdicts({"overlap": rows})
    assert not v["meets_both"] and v["pct_4k_alone"] == 89.0
    rows[1]["pct_alone"] = 95.0
    rows[0] |= overlap_row("split", 8, "h2d", "load_first", 4096, 1.0, 1.0, 1.0, 1.0, 1.5)
    (v,) = verdicts({"overlap": rows})
    assert not v["meets_both"] and v["hidden_full_min"] == pytest.approx(0.5)


def test_load_shape_caps_blocks_and_reshapes_the_ring():
    from gpu_replay.scatter_green import load_config
    from gpu_replay.transfer_defaults import PER_LAYER_TMA as base

    assert load_config(base, 8, {}) == dataclasses.replace(base, grid=8)
    assert load_config(base, 32, {"blocks": 8}).grid == 8
    assert load_config(base, 4, {"blocks": 8}).grid == 4  # a cap never adds blocks
    assert load_config(base, 0, {"blocks": 8}).grid == 8  # whole GPU, capped
    assert load_config(base, 0, {"blocks": 0}).grid == 0  # whole GPU, one block per SM
    cfg = load_config(base, 8, {"chunk": 8 << 10, "stages": 3})
    assert (cfg.chunk, cfg.stages, cfg.pdl) == (8 << 10, 3, True)


def test_sm_count_is_read_from_the_resource_union():
    buf = bytearray(512)
    buf[0:4] = (1).to_bytes(4, "little")  # type SM
    buf[96:100] = (124).to_bytes(4, "little")
    assert sm_count_of(buf) == 124


def test_support_record_and_refusal_without_a_gpu():
    rec = torch_support()
    assert rec["torch"] == torch.__version__ and "module" in rec
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    part, errors = make_partition(8)
    assert part is None and set(errors) == {"driver", "torch"}


def test_dry_run_writes_the_record_and_prints_the_tables(tmp_path, capsys):
    from gpu_replay import scatter_green

    out = tmp_path / "green.json"
    scatter_green.main(["--dry-run", "--out", str(out), "--ks", "8,16"])
    res = json.loads(out.read_text())
    assert res["dry_run"] is True and res["plan"]["ks"] == [8, 16]
    assert "support" in res and res["verdicts"]
    printed = capsys.readouterr().out
    assert "per-layer load alone" in printed and "overlap:" in printed


def test_device_script_dry_run(tmp_path):
    env = os.environ | {"OUT": str(tmp_path), "PYTHON": sys.executable}
    proc = subprocess.run(
        ["bash", "benchmarks/device_green.sh", "--dry-run"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "green.json").read_text())["dry_run"] is True
    assert "rc 0" in (tmp_path / "device_green.log").read_text()


# --- GPU: bytes under a partition ---------------------------------------------------------------


def _gpu_ready() -> bool:
    if not torch.cuda.is_available():
        return False
    from gpu_replay.transfer_cuda import cuda_ext_available

    return cuda_ext_available()


@pytest.fixture(scope="module")
def bench():
    """Small pools shaped like the benchmark's (page 64, contiguous page-layers), a partition of
    8 SMs, the attention stand-in."""
    from gpu_replay.geometry import PoolGeometry
    from gpu_replay.pools import build_device_pool, build_host_pool
    from gpu_replay.scatter_green import Attn

    geo = PoolGeometry(
        name="full",
        layer_ids=tuple(range(0, 12, 2)),
        head_num=4,
        head_dim=64,
        v_head_dim=64,
        dtype_bytes=2,
        page_size=64,
        device_tokens=80 * 64,
        host_tokens=120 * 64,
    )
    host, dev = build_host_pool(geo, "layer_first", pin=True, alloc="malloc"), build_device_pool(geo, "cuda")
    gen = torch.Generator().manual_seed(5)
    for t in (host.k, host.v, *dev.k, *dev.v):
        t.view(torch.int16).copy_(
            torch.randint(-(1 << 14), 1 << 14, t.shape, generator=gen, dtype=torch.int16)
        )

    def indices(n_pages, device):
        hp = torch.randperm(geo.host_pages - 1, generator=gen)[:n_pages] + 1
        dp = torch.randperm(geo.device_pages - 1, generator=gen)[:n_pages] + 1
        ar = torch.arange(geo.page_size)
        hi, di = (hp[:, None] * 64 + ar).flatten(), (dp[:, None] * 64 + ar).flatten()
        return (hi.cuda(), di.cuda()) if device else (hi, di)

    s = SimpleNamespace(geo=geo, dev=dev, hosts={"thp": host}, indices=indices)
    part, errors = make_partition(8)
    if part is None:
        host.release()
        pytest.skip(f"no green contexts here: {errors}")
    yield s, part, Attn()
    part.close()
    host.release()


@pytest.mark.gpu
@pytest.mark.skipif(not _gpu_ready(), reason="needs CUDA and nvcc")
def test_partition_is_within_the_device(bench):
    _, part, _ = bench
    assert part.load_sms >= 8 and part.compute_sms >= 1
    assert part.load_sms + part.compute_sms <= part.total_sms or not part.disjoint
    assert part.total_sms == torch.cuda.get_device_properties(0).multi_processor_count


@pytest.mark.gpu
@pytest.mark.skipif(not _gpu_ready(), reason="needs CUDA and nvcc")
@pytest.mark.parametrize("mode", ["split", "plain_load"])
def test_check_lands_both_directions_under_the_partition(bench, mode):
    from gpu_replay.scatter_green import Side, check, tma_mover

    s, part, attn = bench
    ls = part.load_stream if mode == "split" else torch.cuda.Stream()
    side = Side(
        mode, 8, ls, part.compute_stream, tma_mover(s, part.load_sms), part.load_sms, part.compute_sms
    )
    assert check(s, side, attn).endswith(": ok")


@pytest.mark.gpu
@pytest.mark.skipif(not _gpu_ready(), reason="needs CUDA and nvcc")
@pytest.mark.parametrize("order", ["load_first", "compute_first", "pipelined"])
@pytest.mark.parametrize("direction", ["h2d", "d2h"])
def test_overlap_orders_move_the_right_bytes(bench, order, direction):
    from gpu_replay.scatter_green import Side, _both, tma_mover

    s, part, attn = bench
    side = Side("split", 8, part.load_stream, part.compute_stream, tma_mover(s, part.load_sms), 8, 1)
    hi, di = s.indices(32, True)
    host, h, n = s.hosts["thp"], hi.cpu(), s.geo.layer_num
    for lay in range(n):
        if direction == "h2d":
            s.dev.k[lay][di] = -3
            s.dev.v[lay][di] = -3
        else:
            s.dev.k[lay][di] = lay + 11
            s.dev.v[lay][di] = lay - 11
    marks = _both(s, side, hi, di, direction, order, lambda: attn.small(2), order == "pipelined")
    torch.cuda.synchronize()
    assert marks[0].elapsed_time(marks[1]) > 0
    for i in range(n):
        assert torch.equal(s.dev.k[i][di].cpu().view(torch.int16), host.k[i][h].view(torch.int16)), i
        assert torch.equal(s.dev.v[i][di].cpu().view(torch.int16), host.v[i][h].view(torch.int16)), i
    assert not math.isnan(attn.t_small)
