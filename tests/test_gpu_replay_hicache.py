"""``kvplan gpu-replay`` on HiCache op logs: backups and loads really copy KV between the device
pools and the host pools (CPU torch), and a loaded page holds the bytes its host copy was backed
up (or prefetched) with. Freed device pages are poisoned, so a load that copies nothing fails."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from hicache_workloads import HiPools, hicache_workload  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from gpu_replay.oplog_replay import OpLogReplay, ReplayCheckError, ReplayOptions  # noqa: E402
from gpu_replay.transfer import KVTransfer  # noqa: E402
from simulator.cache_replay import requests_from_tokens  # noqa: E402
from simulator.cli.main import app  # noqa: E402
from simulator.memory_ops import OpKind  # noqa: E402
from simulator.models import load_model  # noqa: E402
from simulator.oplog import model_geometry, read_op_log, write_recording  # noqa: E402
from simulator.radix.hicache_replay import HiCacheReplayConfig, replay_hicache  # noqa: E402

MODEL, TP = "gpt-oss-120b", 8  # per rank: one KV head of 64 dims, a few hundred bytes a token


def _log(tmp_path, policy: str, page: int, ratio: float, seed: int = 1, **l3) -> str:
    """A cache replay's records as an op log with the model's geometry."""
    pools = HiPools(page, 1024, 512, 64)
    reqs = hicache_workload(pools, seed, 20 if l3 else 8)
    work = requests_from_tokens([(r["rid"], r["input_ids"], r["output_ids"]) for r in reqs], page)
    cfg = HiCacheReplayConfig(
        page_size=page, full_tokens=1024, swa_tokens=512, window=64, write_policy=policy,
        hicache_ratio=ratio, record_ops=True, **l3,
    )  # fmt: skip
    ex = replay_hicache(work, cfg)["ops"]
    path = tmp_path / f"{policy}-{page}.npz"
    geometry = model_geometry(load_model(MODEL), TP)
    write_recording(
        path, ex, window=64, geometry=geometry, hicache=dict(io_backend="kernel", layout="layer_first")
    )
    return path


def _replay(path, **opts) -> tuple[OpLogReplay, list]:
    replay = OpLogReplay(read_op_log(path), ReplayOptions(layers=2, verify="every", **opts))
    rows = replay.run()
    return replay, rows


@pytest.mark.parametrize(("policy", "page", "ratio"), [("write_through", 1, 2.0), ("write_back", 16, 2.0)])
def test_hicache_records_move_data_and_loads_return_the_backed_up_bytes(tmp_path, policy, page, ratio):
    replay, rows = _replay(_log(tmp_path, policy, page, ratio))
    assert not replay.not_replayed
    assert {"BACKUP_D2H", "LOAD_H2D", "DEMOTE"} <= set(replay.replayed)
    assert sum(r.load_pages for r in rows) > 0 and sum(r.backup_pages for r in rows) > 0
    assert replay.checks > 10  # every check read each live device page and host page back


def test_l3_prefetched_pages_load_back_with_their_storage_data(tmp_path):
    path = _log(tmp_path, "write_through", 16, 1.0, storage_backend="sim", prefetch_policy="wait_complete",
                prefetch_threshold=64)  # fmt: skip
    assert OpKind.STORAGE_PREFETCH in {op.kind for op in read_op_log(path).ops}
    replay, _ = _replay(path)
    assert replay.replayed["STORAGE_PREFETCH"] and replay.replayed["LOAD_H2D"]


@pytest.mark.parametrize("direction", ["h2d", "d2h"])
def test_a_copy_that_moves_nothing_is_caught(tmp_path, monkeypatch, direction):
    """The data check is live: with one direction of the transfer a no-op, a loaded page keeps
    its poison (or a stale host page is loaded) and the replay fails."""
    path = _log(tmp_path, "write_through", 1, 2.0)
    real = KVTransfer.transfer

    def skip(self, hi, di, layers, d):
        if d != direction:
            real(self, hi, di, layers, d)

    monkeypatch.setattr(KVTransfer, "transfer", skip)
    with pytest.raises(ReplayCheckError, match="lost their data|differ"):
        _replay(path)


def test_load_returns_the_exact_bytes_backed_up(tmp_path, monkeypatch):
    """Byte for byte: the device pages a load writes equal the device pages the last backup into
    those host pages read (FULL pool, every replayed layer)."""
    path = _log(tmp_path, "write_through", 1, 2.0)
    log = read_op_log(path)
    snaps: dict[int, torch.Tensor] = {}  # host page -> bytes backed up into it
    compared = []
    real = KVTransfer.transfer

    def spy(self, hi, di, layers, d):
        real(self, hi, di, layers, d)
        if self is not movers.get("full"):
            return
        data = torch.stack([self.dev.k[layer][di] for layer in layers])
        if d == "d2h":
            for j, h in enumerate(hi.tolist()):
                snaps[h] = data[:, j].clone()
        else:
            for j, h in enumerate(hi.tolist()):
                compared.append(torch.equal(snaps[h], data[:, j]))

    monkeypatch.setattr(KVTransfer, "transfer", spy)
    replay = OpLogReplay(log, ReplayOptions(layers=2, verify="end"))
    movers = {}
    orig_mover = replay.hicache.mover

    def mover(name):
        movers[name] = orig_mover(name)
        return movers[name]

    replay.hicache.mover = mover
    replay.run()
    assert compared and all(compared)


def test_cli_gpu_replay_and_ops_stats_show_the_hicache_kinds(tmp_path):
    path = _log(tmp_path, "write_back", 16, 2.0)
    res = CliRunner().invoke(
        app, ["gpu-replay", str(path), "--device", "cpu", "--layers", "1", "--model", MODEL, "--tp", str(TP),
              "--out", str(tmp_path / "t.csv")],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "HiCache loads (H->D)" in res.output and "NOT replayed" not in res.output
    st = CliRunner().invoke(app, ["ops", "stats", str(path), "--json"])
    assert st.exit_code == 0, st.output
    stats = json.loads(st.stdout)
    for kind in ("BACKUP_D2H", "LOAD_H2D", "DEMOTE"):
        assert stats["records_by_kind"][kind] > 0
    assert stats["host_pages_by_kind"]["LOAD_H2D_full"] > 0
    assert np.isclose(sum(stats["host_pages"]), sum(read_op_log(path).header["hicache"]["host_pages"]))
