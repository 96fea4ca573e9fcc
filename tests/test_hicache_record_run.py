"""``kvplan run --enable-hierarchical-cache --record-ops``: every write policy, the L3 tier and
the overlap loop record their memory ops (device and host page ids) and change no result."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from simulator.cli.main import app
from simulator.memory_ops import OpKind
from simulator.oplog import read_op_log, replay_ops

runner = CliRunner()
# the bundled trace's first requests on small pools: demotion, host eviction and load-back
BASE = ["run", "--limit", "120", "--max-total-tokens", "120000", "--page-size", "16"]
BASE += ["--enable-hierarchical-cache", "--hicache-ratio", "1", "--json"]
CASES = {
    "write_through": [],
    "write_through_selective": ["--hicache-write-policy", "write_through_selective"],
    "write_back": ["--hicache-write-policy", "write_back"],
    "l3_sim": ["--hicache-storage-backend", "sim"],
    "overlap": ["--enable-overlap-schedule"],
}
# Both runs check invariants: a checked run steps where a plain one jumps, which moves float
# times in the last bits whether it records or not (unchecked runs: the test below).


@pytest.mark.parametrize("case", sorted(CASES))
def test_recorded_hicache_run_has_the_same_summary_and_replays(case: str, tmp_path) -> None:
    ops = tmp_path / "ops.npz"
    args = [*BASE, *CASES[case]]
    rec = runner.invoke(app, [*args, "--check-invariants", "--record-ops", str(ops)])
    assert rec.exit_code == 0, rec.output
    plain = runner.invoke(app, [*args, "--check-invariants"])
    assert plain.exit_code == 0, plain.output
    a, b = json.loads(rec.stdout), json.loads(plain.stdout)
    a.pop("provenance"), b.pop("provenance")
    assert a == b  # recording changes nothing, to the last bit
    counts = a["hicache"]["counts"]
    assert counts["demoted_nodes"] and counts["load_back_ok"]
    assert case == "write_through_selective" or counts["host_evict_calls_full"]
    log = read_op_log(ops)
    kinds = {op.kind for op in log.ops}
    assert {OpKind.BACKUP_D2H, OpKind.DEMOTE, OpKind.LOAD_H2D} <= kinds
    assert (OpKind.HOST_FREE in kinds) == bool(counts.get("host_evict_calls_full"))
    assert log.header["hicache"]["host_pages"] and log.header["hicache"]["write_policy"]
    assert sum(1 for _ in replay_ops(log)) > 0  # every record applies on fresh pools
    st = runner.invoke(app, ["ops", "stats", str(ops), "--json"])
    assert st.exit_code == 0, st.output
    stats = json.loads(st.stdout)
    assert stats["host_pages_by_kind"]["LOAD_H2D_full"] * 16 == counts["load_full_tokens"]
    assert stats["host_pages_by_kind"]["BACKUP_D2H_full"] * 16 == counts["backup_full_tokens"]


@pytest.mark.parametrize("case", ["write_back", "l3_sim"])
def test_recording_without_checks_is_bit_identical(case: str, tmp_path) -> None:
    args = [*BASE, *CASES[case]]
    rec = runner.invoke(app, [*args, "--record-ops", str(tmp_path / "ops.npz")])
    plain = runner.invoke(app, args)
    assert rec.exit_code == 0 and plain.exit_code == 0, rec.output + plain.output
    a, b = json.loads(rec.stdout), json.loads(plain.stdout)
    a.pop("provenance"), b.pop("provenance")
    assert a == b
