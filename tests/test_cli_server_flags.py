"""The server flags are declared once (``simulator/cli/server_flags.py``): every command that
takes a flag spells it the same way and gives it SimConfig's one default."""

from __future__ import annotations

import dataclasses

import pytest
import typer.main
from typer.testing import CliRunner

from simulator.cli.main import app
from simulator.cli.server_flags import ALL_FLAGS, FLAGS, POOL_FLAGS, SERVER_FLAGS
from simulator.engine.config import SimConfig
from simulator.hicache_args import HiCacheArgs

SIM_DEFAULTS = {f.name: f.default for f in dataclasses.fields(SimConfig)}
HICACHE_DEFAULTS = {f.name: f.default for f in dataclasses.fields(HiCacheArgs)}
COMMANDS = typer.main.get_command(app).commands  # type: ignore[attr-defined]


def _params(command: str) -> dict:
    return {p.name: p for p in COMMANDS[command].params}


def test_every_row_names_a_simconfig_field_and_flags_are_unique():
    assert {f.field for f in SERVER_FLAGS if f.group is None} <= set(SIM_DEFAULTS)
    # HiCache's rows name HiCacheArgs fields (SimConfig.hicache), every one of them.
    assert {f.field for f in SERVER_FLAGS if f.group == "hicache"} == set(HICACHE_DEFAULTS)
    spelled = [d for f in SERVER_FLAGS for decl in f.decls for d in decl.split("/")]
    assert len(spelled) == len(set(spelled))


@pytest.mark.parametrize("command", ["run", "bench-multiturn", "demo", "pools", "cache-replay"])
def test_each_command_spells_each_flag_once_with_simconfigs_default(command):
    params = _params(command)
    shared = [name for name in params if name in FLAGS]
    assert shared, f"{command} takes no shared server flag"
    for name in shared:
        param, row = params[name], FLAGS[name]
        defaults = HICACHE_DEFAULTS if row.group == "hicache" else SIM_DEFAULTS
        assert param.default == defaults[name], (command, name)
        declared = [d for decl in row.decls for d in decl.split("/")]
        assert sorted(param.opts + param.secondary_opts) == sorted(declared), (command, name)


@pytest.mark.parametrize("command", ["run", "bench-multiturn", "demo"])
def test_the_commands_that_run_the_server_take_every_server_flag(command):
    assert set(ALL_FLAGS) <= set(_params(command))


def test_pools_takes_the_pool_sizing_flags_and_gpu_defaults_to_h200_everywhere():
    assert set(POOL_FLAGS) <= set(_params("pools"))
    for command in ("run", "bench-multiturn", "demo", "pools"):
        assert _params(command)["gpu"].default == "H200"


def test_enumerated_flags_list_their_names_in_help():
    res = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "400"})
    assert res.exit_code == 0
    for text in ("fcfs, lpm", "interval, iteration, none, window", "legacy, unified", "SGLang --tp-size"):
        assert text in res.output
