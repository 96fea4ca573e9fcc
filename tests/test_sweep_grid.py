"""kvplan sweep's grid: axes over any server flag, exact decimal ranges, one-line errors naming
the flag, the default grid, and the t interval over seeds."""

from __future__ import annotations

import math
import statistics

import pytest
from typer.testing import CliRunner

from simulator.cli.main import app
from simulator.cli.server_flags import SERVER_FLAGS
from simulator.errors import FlagError
from simulator.planner import grid as grid_mod
from simulator.planner.grid import check_axes, default_axes, grid_points, parse_axis, resolve_flag
from simulator.planner.stats import aggregate, mean_interval, t_quantile_975

runner = CliRunner()


def test_ranges_are_exact_decimal_and_inclusive():
    axis = parse_axis("swa-full-tokens-ratio=0.1:0.5:0.1")
    assert axis.values == (0.1, 0.2, 0.3, 0.4, 0.5)  # not 0.30000000000000004
    assert parse_axis("--page-size=16:64:16,128").values == (16, 32, 48, 64, 128)
    assert parse_axis("page_size=1").values == (1,)  # SimConfig field name works too


def test_lists_none_booleans_and_policies():
    assert parse_axis("--mem-fraction-static=none,0.8").values == (None, 0.8)
    assert parse_axis("disable-overlap-schedule=true,false").values == (True, False)
    assert parse_axis("swa-eviction=interval,window").values == ("interval", "window")
    assert parse_axis("eviction-policy=lru,lfu").flag.field == "radix_eviction_policy"  # an alias
    assert parse_axis("--request-rate=1,2").flag.field == "request_rate"  # a workload knob


def test_every_server_flag_is_an_axis():
    """A row added to SERVER_FLAGS is sweepable with no change to the grid code."""
    for flag in SERVER_FLAGS:
        if flag.field in grid_mod.NOT_AXES:
            assert resolve_flag(flag.name) is None
        else:
            field = flag.field if flag.group is None else f"{flag.group}.{flag.field}"
            assert resolve_flag(flag.name).field == field
            for decl in flag.decls:
                assert resolve_flag(decl.split("/")[0]).field == field


@pytest.mark.parametrize(
    ("arg", "names"),
    [
        ("swa-full-tokens-ratio=0:1:0.5", "--swa-full-tokens-ratio"),  # 0 is outside (0, 1]
        ("--tp=1:x:1", "--tp"),
        ("--swa-eviction=bogus", "--swa-eviction"),
        ("--page-size=1.5", "--page-size"),
        ("--page-size=64:16:16", "--page-size"),  # ends before it starts
        ("--page-size=16:64:0", "--page-size"),
        ("--tombstone=1:2:1", "--tombstone"),  # a range of a named flag
        ("--tp=none", "--tp"),  # tp cannot be unset
        ("--page-size=16,16", "--page-size"),
        ("--page-size=16,,32", "--page-size"),
        ("--page-size=nan", "--page-size"),
        ("no-such-flag=1", "no-such-flag"),
        ("swa-full-tokens-ratio", "swa-full-tokens-ratio"),  # no =SPEC
    ],
)
def test_grid_errors_name_the_flag(arg, names):
    with pytest.raises(FlagError) as err:
        parse_axis(arg)
    message = str(err.value)
    assert "\n" not in message and names in message and message.startswith("--grid")


def test_cli_grid_error_is_one_line_exit_1():
    res = runner.invoke(app, ["sweep", "--grid", "--page-size=1.5", "-j", "1"])
    assert res.exit_code == 1
    assert res.stderr.strip().splitlines() == ["kvplan: error: --grid --page-size: 1.5 is not an integer"]


def test_axis_and_fixed_value_clash():
    with pytest.raises(FlagError, match="--swa-full-tokens-ratio: also given a fixed value"):
        check_axes([parse_axis("swa-full-tokens-ratio=0.5")], {"swa_full_tokens_ratio": 0.3})
    with pytest.raises(FlagError, match="given as two axes"):
        check_axes([parse_axis("page-size=16"), parse_axis("page_size=32")], {})


def test_points_last_axis_fastest():
    axes = [parse_axis("page-size=16,32"), parse_axis("swa-eviction=interval,window")]
    assert list(grid_points(axes)) == [
        {"page_size": 16, "swa_eviction": "interval"},
        {"page_size": 16, "swa_eviction": "window"},
        {"page_size": 32, "swa_eviction": "interval"},
        {"page_size": 32, "swa_eviction": "window"},
    ]


def test_default_grid_degrades_with_a_note(monkeypatch):
    axes, notes = default_axes()
    names = [a.flag.name for a in axes]
    assert names[0] == "--swa-full-tokens-ratio" and len(axes[0].values) == 10
    from simulator.cli.server_flags import HICACHE_IN_SERVED_RUNS

    if resolve_flag("--hicache-ratio") is None or not HICACHE_IN_SERVED_RUNS:
        assert names == ["--swa-full-tokens-ratio"] and "--hicache-ratio" in notes[0]
    else:
        assert names == ["--swa-full-tokens-ratio", "--hicache-ratio"] and not notes
    # A default axis naming a flag this kvplan lacks is dropped with a note; one it has is kept.
    monkeypatch.setattr(grid_mod, "DEFAULT_GRID", (("--page-size", "16,32"), ("--no-such-ratio", "1,2")))
    axes, notes = default_axes()
    assert [a.flag.name for a in axes] == ["--page-size"] and "--no-such-ratio" in notes[0]
    # a default value the flag refuses (here: tp cannot be unset) is dropped with a note
    monkeypatch.setattr(grid_mod, "DEFAULT_GRID", (("--tp", "none,8"),))
    axes, notes = default_axes()
    assert axes[0].values == (8,) and "--tp" in notes[0] and "left out" in notes[0]


def test_grouped_flag_axis_sets_its_group():
    """A HiCache flag (a HiCacheArgs field) is an axis too; a point sets it inside cfg.hicache."""
    from simulator.engine.config import SimConfig
    from simulator.planner.grid import apply_point

    axis = parse_axis("hicache-ratio=none,2:4:2")
    assert axis.flag.field == "hicache.hicache_ratio" and axis.values == (None, 2.0, 4.0)
    base = SimConfig(page_size=16)
    cfgs = [apply_point(base, point) for point in grid_points([axis])]
    assert [c.hicache.hicache_ratio for c in cfgs] == [None, 2.0, 4.0]
    assert [c.hicache.enabled for c in cfgs] == [False, True, True]
    assert all(c.page_size == 16 for c in cfgs)
    with pytest.raises(FlagError, match="--hicache-ratio"):
        parse_axis("hicache-ratio=-1")


def test_t_quantiles():
    assert t_quantile_975(1) == pytest.approx(12.7062, abs=1e-4)
    assert t_quantile_975(4) == pytest.approx(2.7764, abs=1e-4)
    assert t_quantile_975(31) == pytest.approx(2.0395, abs=1e-4)
    assert t_quantile_975(100) == pytest.approx(1.98397, abs=1e-4)
    assert t_quantile_975(10_000) == pytest.approx(1.96020, abs=1e-4)


def test_mean_interval_by_hand():
    values = [0.61, 0.64, 0.58, 0.66]
    mean, lo, hi = mean_interval(values)
    half = 3.1824463 * statistics.stdev(values) / math.sqrt(4)
    assert mean == pytest.approx(0.6225)
    assert (lo, hi) == pytest.approx((0.6225 - half, 0.6225 + half))
    assert mean_interval([0.5]) == (0.5, 0.5, 0.5)


def test_aggregate_nested_summaries():
    runs = [
        {"cache_hit_rate": 0.5, "ttft": {"p90": 1.0}, "client_mode": "open"},
        {"cache_hit_rate": 0.7, "ttft": {"p90": 3.0}, "client_mode": "open"},
    ]
    means, interval = aggregate(runs)
    assert means == {"cache_hit_rate": pytest.approx(0.6), "ttft": {"p90": 2.0}, "client_mode": "open"}
    half = 12.7062047 * statistics.stdev([1.0, 3.0]) / math.sqrt(2)
    assert interval["ttft.p90"] == pytest.approx([2.0 - half, 2.0 + half])


def test_progress_plain_line_counts_stored_runs_as_done():
    import io

    from simulator.planner.progress import SweepProgress

    stream = io.StringIO()
    with SweepProgress(5, done=2, stream=stream, interval_s=0.0) as bar:
        bar.advance()
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("kvplan sweep: 3/5 runs, ") and "runs/s" in lines[0] and "left" in lines[0]
    assert bar.new == 1 and bar._bar is None  # not a terminal: no rich bar
