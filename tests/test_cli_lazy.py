"""Lazy subcommands (issue 14, item 3): ``kvplan --help`` imports no command module, and what it
lists is exactly what the real commands would list."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer
import typer.main

from simulator.cli.lazy import LazyCommand, first_paragraph
from simulator.cli.main import COMMANDS, app

REPO = Path(__file__).resolve().parents[1]

# Print the heavy modules the process holds after running ``kvplan ARGS`` (argv[1:]).
_PROBE = """
import json, sys
from simulator.cli.main import app
try:
    app(sys.argv[1:])
except SystemExit:
    pass
heavy = ("pandas", "matplotlib", "pyarrow", "numpy", "scipy", "simpy", "simulator.cli.run_cmd",
         "simulator.engine", "traces", "rich")
print(json.dumps(sorted({m for m in sys.modules for h in heavy if m == h or m.startswith(h + ".")})))
"""


def _imported_after(*args: str) -> set[str]:
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, *args], cwd=REPO, capture_output=True, text=True, check=True
    )
    return set(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_help_imports_no_command_module() -> None:
    """``kvplan --help`` and bare ``kvplan`` stay at typer: no numpy, pandas, engine, traces, and
    no rich (the group's help is click's plain layout; rich's imports were 0.15 s of 0.25 s)."""
    for args in (["--help"], []):
        assert _imported_after(*args) == set(), args


def test_subcommand_help_imports_its_module_only() -> None:
    """``kvplan pools --help`` loads the pools command, not the others (e.g. the trace package)."""
    mods = _imported_after("pools", "--help")
    assert "simulator.cli.run_cmd" not in mods
    assert "pandas" not in mods


@pytest.mark.parametrize("spec", COMMANDS, ids=lambda s: s.name)
def test_listed_help_is_the_commands_own(spec: LazyCommand) -> None:
    """The line in ``COMMANDS`` is the first paragraph of the real command's help (no drift)."""
    real = spec.load(None)
    assert real.name == spec.name
    assert first_paragraph(real.short_help or real.help or "") == spec.help


def test_listing_same_with_every_command_loaded(capsys: pytest.CaptureFixture[str]) -> None:
    """The rendered ``kvplan --help`` with placeholders equals the one with the real commands."""
    group = typer.main.get_command(app)
    ctx = typer.Context(group, info_name="kvplan")
    lazy = group.get_help(ctx)
    for name in list(group.commands):  # type: ignore[attr-defined]
        group.commands[name]  # type: ignore[attr-defined]  # load each real command
    assert group.get_help(ctx) == lazy
    assert "gpu-replay" in lazy and "ops" in lazy


def test_commands_mapping_loads_on_access() -> None:
    """Tests and tools index ``group.commands[name]``: that loads the real command, with its options."""
    group = typer.main.get_command(app)
    assert list(group.commands)[:2] == ["pools", "cache-replay"]  # type: ignore[attr-defined]
    params = {p.name for p in group.commands["run"].params}  # type: ignore[attr-defined]
    assert {"trace", "model", "page_size"} <= params
    assert "nonexistent" not in group.commands  # type: ignore[attr-defined]


@pytest.mark.parametrize("trace", [None, "traces/data/azure_conv_head1000.csv"])
def test_run_without_out_imports_no_matplotlib_pandas_or_pyarrow(trace: str | None) -> None:
    """``kvplan run --json`` on a Mooncake or Azure trace prints its summary and provenance
    without matplotlib (plots are ``kvplan report``'s), pandas or pyarrow: those readers keep the
    request table as numpy columns and the trace hash is computed from them (issue 14)."""
    args = ["run", "--limit", "40", "--page-size", "64", "--json", "--no-progress"]
    mods = _imported_after(*args, *(["--trace", trace] if trace else []))
    assert "simulator.engine" in mods  # the run really ran
    for heavy in ("matplotlib", "pandas", "pyarrow"):
        assert not any(m == heavy or m.startswith(heavy + ".") for m in mods), heavy


def test_eager_and_lazy_commands_mix() -> None:
    """A command registered the old way (``app.command``) still works next to the lazy ones,
    listed after them (a branch that registers ``plan`` / ``report`` eagerly merges cleanly)."""
    from typer.testing import CliRunner

    from simulator.cli.lazy import LazyGroup

    class Group(LazyGroup):
        lazy_commands = (LazyCommand("pools", "simulator.cli.pools_cmd:pools", COMMANDS[0].help),)

    mixed = typer.Typer(cls=Group, add_completion=False)
    mixed.callback()(lambda: None)  # a group, as kvplan's app is

    @mixed.command("hello")
    def hello() -> None:
        """Say hello."""
        typer.echo("hello")

    group = typer.main.get_command(mixed)
    assert list(group.commands) == ["pools", "hello"]  # type: ignore[attr-defined]
    assert CliRunner().invoke(mixed, ["hello"]).output == "hello\n"
    listing = CliRunner().invoke(mixed, ["--help"]).output
    assert "Say hello." in listing and "pool sizes" in listing


def test_group_help_lists_every_whole_help_line() -> None:
    """The plain listing shows each command's whole line (click would cut it at 45 characters)."""
    proc = subprocess.run(
        [sys.executable, "-m", "simulator.cli.main", "--help"], cwd=REPO, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    flat = " ".join(proc.stdout.split())
    for spec in COMMANDS:
        assert " ".join(spec.help.split()) in flat.replace("- ", "-"), spec.name
    assert "..." not in proc.stdout.split("Commands:")[1]


def test_bare_kvplan_prints_the_help() -> None:
    """``kvplan`` with no arguments prints the group's help on stdout, exit status 2 (with the
    plain help, typer's error printer printed nothing at all)."""
    proc = subprocess.run(
        [sys.executable, "-m", "simulator.cli.main"], cwd=REPO, capture_output=True, text=True
    )
    assert proc.returncode == 2 and "Commands:" in proc.stdout and "step-replay" in proc.stdout
