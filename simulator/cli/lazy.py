"""Subcommands that import their module only when run (issue 14, item 3: ``kvplan --help`` < 0.2 s).

Each subcommand is named with its import path and the one-line help that ``kvplan --help`` lists.
Listing the commands builds a placeholder from that line; running one (or asking for its own
``--help``) imports its module and builds the real typer command, exactly as ``app.command`` /
``app.add_typer`` would. ``tests/test_cli_lazy.py`` checks that every listed line is the real
command's and that the listing is the same with every command loaded.
"""

from __future__ import annotations

import gc
import importlib
import inspect
from collections.abc import Iterator, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

import typer
import typer.core


@dataclass(frozen=True)
class LazyCommand:
    """One subcommand: ``target`` is ``"module:attribute"``, a command function or a ``typer.Typer``."""

    name: str
    target: str
    help: str  # the first paragraph of the command's help, as ``kvplan --help`` lists it

    def load(self, rich_markup_mode: Any) -> typer.core.TyperCommand | typer.core.TyperGroup:
        """The real command, built by typer from a one-command holder app with the group's settings."""
        module_name, _, attribute = self.target.partition(":")
        obj = getattr(importlib.import_module(module_name), attribute)
        holder = typer.Typer(add_completion=False, rich_markup_mode=rich_markup_mode)
        if isinstance(obj, typer.Typer):
            holder.add_typer(obj, name=self.name)
        else:
            holder.command(self.name)(obj)
        return typer.main.get_group(holder).commands[self.name]

    def placeholder(self) -> typer.core.TyperCommand:
        """A command with the name and help line only, for the listing (``short_help``: the plain
        listing shows the whole line instead of cutting it at 45 characters)."""
        return typer.core.TyperCommand(name=self.name, help=self.help, short_help=self.help)


def first_paragraph(help_text: str) -> str:
    """The part of a command's help that a group's listing shows (typer's rich_utils does the same)."""
    return inspect.cleandoc(help_text).split("\n\n")[0].strip()


class LazyCommands(MutableMapping[str, Any]):
    """``TyperGroup.commands`` whose entries import their module on first access."""

    def __init__(self, loaded: dict[str, Any], specs: Sequence[LazyCommand], rich_markup_mode: Any) -> None:
        self._specs = {spec.name: spec for spec in specs}
        self._loaded = dict(loaded)
        self._mode = rich_markup_mode

    def __getitem__(self, name: str) -> Any:
        if name not in self._loaded:
            self._loaded[name] = self._specs[name].load(self._mode)
        return self._loaded[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        if name not in self:
            raise KeyError(name)
        self._specs.pop(name, None)
        self._loaded.pop(name, None)

    def __contains__(self, name: object) -> bool:
        return name in self._specs or name in self._loaded

    def __iter__(self) -> Iterator[str]:
        yield from self._specs
        yield from (name for name in self._loaded if name not in self._specs)

    def __len__(self) -> int:
        return len(self._specs) + sum(name not in self._specs for name in self._loaded)

    def for_listing(self, name: str) -> Any:
        """A listed command's placeholder (no import; the same line whether loaded or not, which
        tests/test_cli_lazy.py proves equal to the real help), else the eagerly added command."""
        spec = self._specs.get(name)
        return self._loaded.get(name) if spec is None else spec.placeholder()


class LazyGroup(typer.core.TyperGroup):
    """A typer group whose subcommands come from ``lazy_commands`` (set by a subclass)."""

    lazy_commands: Sequence[LazyCommand] = ()

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.commands = LazyCommands(dict(self.commands), self.lazy_commands, self.rich_markup_mode)
        self._listing = False
        self._collector_was_on = False  # set by main(): the collector is on again once resolved

    def main(self, *args: Any, **kwargs: Any) -> Any:
        """Click's ``main``, with the cyclic collector off until a subcommand is resolved: start-up
        (parsing the command line, importing the chosen command's module) only builds long-lived
        objects, and the collector walked them some seven times for nothing, about 50 ms of a
        ``kvplan run`` (issue 14). The subcommand itself runs with the collector on."""
        self._collector_was_on = gc.isenabled()
        gc.disable()
        try:
            return super().main(*args, **kwargs)
        finally:
            if self._collector_was_on:
                gc.enable()

    def resolve_command(self, ctx: typer.Context, args: list[str]) -> Any:
        found = super().resolve_command(ctx, args)
        if self._collector_was_on:
            gc.enable()
        return found

    def list_commands(self, ctx: typer.Context) -> list[str]:
        return list(self.commands)

    def get_command(self, ctx: typer.Context, cmd_name: str) -> Any:
        if self._listing:
            return self.commands.for_listing(cmd_name)  # type: ignore[attr-defined]
        return self.commands.get(cmd_name)

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        """Bare ``kvplan``: the help on stdout and exit status 2, as before. (Typer's rich error
        printer left that to the rich help, which printed itself; the plain help is a string that
        click's ``NoArgsIsHelpError`` would print on stderr.)"""
        if not args and self.no_args_is_help and not ctx.resilient_parsing:
            typer.echo(ctx.get_help())
            ctx.exit(2)
        return super().parse_args(ctx, args)

    def format_help(self, ctx: typer.Context, formatter: Any) -> None:
        """The group's own help in click's plain layout: typer's rich layout imports rich (its
        console, markdown and syntax modules), about 0.15 s of a 0.25 s ``kvplan --help``. Each
        subcommand's ``--help`` keeps typer's rich layout."""
        self._listing = True
        try:
            super(typer.core.TyperGroup, self).format_help(ctx, formatter)
        finally:
            self._listing = False
