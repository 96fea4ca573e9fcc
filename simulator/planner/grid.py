"""The sweep's grid: ``--grid FLAG=SPEC`` axes over any server flag, policy or workload knob.

An axis is named by any spelling of a flag in :data:`~simulator.cli.server_flags.SERVER_FLAGS`
(with or without the leading ``--``, SimConfig's field name too), or by one of the workload
knobs in :data:`WORKLOAD_AXES`. A SPEC is a comma list whose items are values or inclusive
ranges ``a:b:step``; ranges are counted in decimal arithmetic, so ``0.1:0.5:0.1`` gives exactly
0.1, 0.2, 0.3, 0.4 and 0.5. ``none`` (or ``default``) stands for "not set" (SGLang's own
resolution) on flags that may be unset; booleans are ``true``/``false``. Every value is checked
by the flag's own check before any run, and every error is one line naming the flag.

A new server flag (a row in SERVER_FLAGS) becomes a grid axis with no change here.
"""

from __future__ import annotations

import dataclasses
import itertools
import types
import typing
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from simulator.cli.checks import NON_NEGATIVE, RATE, Check
from simulator.engine.config import SimConfig
from simulator.errors import FlagError

MAX_AXIS_VALUES = 100_000
_NONE_WORDS = ("none", "default")
_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")

# The default grid: the two ratios SGLang leaves to the user. An axis whose flag this kvplan
# does not have yet is left out with a note (see default_axes).
DEFAULT_GRID: tuple[tuple[str, str], ...] = (
    ("--swa-full-tokens-ratio", "0.1:1.0:0.1"),
    ("--hicache-ratio", "none,2,4"),
)


@dataclass(frozen=True)
class AxisFlag:
    """What an axis sets: the SimConfig field, the flag's name, its check and allowed names."""

    field: str
    name: str
    check: Check | None = None
    choices: typing.Callable[[], Sequence[str]] | None = None


# Workload knobs that are not server flags but a what-if sweep wants ("twice the rate").
WORKLOAD_AXES: tuple[AxisFlag, ...] = (
    AxisFlag("request_rate", "--request-rate", RATE),
    AxisFlag("time_scale", "--time-scale", NON_NEGATIVE),
    AxisFlag("think_time_s", "--think-time", NON_NEGATIVE),
)
# Not axes: they change how a run is observed or checked, not what it computes.
NOT_AXES = frozenset({"log_decode", "check_invariants"})


@dataclass(frozen=True)
class Axis:
    """One grid axis: the flag and its values (typed as the SimConfig field)."""

    flag: AxisFlag
    values: tuple[Any, ...]


def axis_flags() -> dict[str, AxisFlag]:
    """Every name an axis may be given by (``--flag``, ``flag``, ``field``) -> its flag."""
    from simulator.cli.server_flags import SERVER_FLAGS

    flags = [
        AxisFlag(_axis_field(f.field, f.group), f.name, f.check, f.choices)
        for f in SERVER_FLAGS
        if f.field not in NOT_AXES
    ]
    out: dict[str, AxisFlag] = {}
    for flag in [*flags, *WORKLOAD_AXES]:
        out[flag.field] = flag
        out[flag.name.lstrip("-")] = flag
    for f in SERVER_FLAGS:
        key = _axis_field(f.field, f.group)
        if key in out:
            out.setdefault(f.field, out[key])
            for decl in f.decls:
                out[decl.split("/")[0].lstrip("-")] = out[key]
    return out


def _axis_field(field: str, group: str | None) -> str:
    """A grouped flag (e.g. HiCache's, a HiCacheArgs field) is addressed as ``group.field``."""
    return field if group is None else f"{group}.{field}"


def apply_point(base: SimConfig, values: dict[str, Any]) -> SimConfig:
    """``base`` with one grid point's values set; ``group.field`` keys set the group's dataclass."""
    plain = {k: v for k, v in values.items() if "." not in k}
    grouped: dict[str, dict[str, Any]] = {}
    for key, value in values.items():
        if "." in key:
            group, field = key.split(".", 1)
            grouped.setdefault(group, {})[field] = value
    for group, sets in grouped.items():
        plain[group] = dataclasses.replace(getattr(base, group), **sets)
    return dataclasses.replace(base, **plain)


def field_default(field: str) -> Any:
    """The default of a SimConfig field or of a grouped ``group.field``."""
    group, _, name = field.rpartition(".")
    owner = getattr(SimConfig(), group) if group else SimConfig()
    return getattr(owner, name)


def resolve_flag(name: str) -> AxisFlag | None:
    """The axis flag called ``name`` (any spelling), or None if kvplan has no such flag."""
    key = name.strip()
    flags = axis_flags()
    return flags.get(key.lstrip("-")) or flags.get(key.lstrip("-").replace("-", "_"))


def field_type(field: str) -> tuple[type, bool]:
    """(base type, may be None) of a SimConfig field (or of a grouped ``group.field``)."""
    group, _, name = field.rpartition(".")
    owner = typing.get_type_hints(SimConfig)[group] if group else SimConfig
    hint = typing.get_type_hints(owner)[name]
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args:
        return next(a for a in args if a is not type(None)), True
    return hint, False


def parse_axis(text: str) -> Axis:
    """One ``FLAG=SPEC`` argument as an axis; :class:`FlagError` (one line) when malformed."""
    name, sep, spec = text.partition("=")
    if not sep or not name.strip():
        raise FlagError(f"--grid {text!r}: expected FLAG=SPEC, e.g. --grid swa-full-tokens-ratio=0.1:0.9:0.2")
    flag = resolve_flag(name)
    if flag is None:
        raise FlagError(f"--grid {name.strip()}: not a server flag, policy or workload knob kvplan sweeps")
    return Axis(flag, parse_values(flag, spec))


def parse_values(flag: AxisFlag, spec: str) -> tuple[Any, ...]:
    """The values of one SPEC for ``flag``, typed and checked."""
    base, optional = field_type(flag.field)
    items = [s.strip() for s in spec.split(",")]
    if not spec.strip() or any(not s for s in items):
        raise FlagError(f"--grid {flag.name}: empty value in {spec!r}")
    values: list[Any] = []
    for item in items:
        if ":" in item:
            values.extend(_parse_range(flag, item, base))
        else:
            values.append(_parse_one(flag, item, base, optional))
    seen: set[Any] = set()
    for v in values:
        if v in seen:
            raise FlagError(f"--grid {flag.name}: value {v!r} given twice")
        seen.add(v)
        _check(flag, v)
    return tuple(values)


def _parse_one(flag: AxisFlag, item: str, base: type, optional: bool) -> Any:
    if item.lower() in _NONE_WORDS:
        if not optional:
            raise FlagError(f"--grid {flag.name}: {item!r} is not allowed (the flag cannot be unset)")
        return None
    if base is bool:
        if item.lower() in _TRUE:
            return True
        if item.lower() in _FALSE:
            return False
        raise FlagError(f"--grid {flag.name}: {item!r} is not true or false")
    if base is str:
        return item
    number = _decimal(flag, item)
    return _typed(flag, number, base)


def _parse_range(flag: AxisFlag, item: str, base: type) -> list[Any]:
    parts = item.split(":")
    if len(parts) != 3:
        raise FlagError(f"--grid {flag.name}: {item!r} is not a range a:b:step")
    if base not in (int, float):
        raise FlagError(f"--grid {flag.name}: a range {item!r} needs a numeric flag")
    start, stop, step = (_decimal(flag, p) for p in parts)
    if step <= 0:
        raise FlagError(f"--grid {flag.name}: range {item!r} needs a step > 0")
    if stop < start:
        raise FlagError(f"--grid {flag.name}: range {item!r} ends before it starts")
    count = int((stop - start) / step) + 1
    if count > MAX_AXIS_VALUES:
        raise FlagError(f"--grid {flag.name}: range {item!r} has {count} values (at most {MAX_AXIS_VALUES})")
    return [_typed(flag, start + i * step, base) for i in range(count)]


def _decimal(flag: AxisFlag, text: str) -> Decimal:
    try:
        value = Decimal(text.strip())
    except InvalidOperation:
        raise FlagError(f"--grid {flag.name}: {text.strip()!r} is not a number") from None
    if not value.is_finite():
        raise FlagError(f"--grid {flag.name}: {text.strip()!r} is not a finite number")
    return value


def _typed(flag: AxisFlag, value: Decimal, base: type) -> Any:
    if base is int:
        if value != value.to_integral_value():
            raise FlagError(f"--grid {flag.name}: {value} is not an integer")
        return int(value)
    return float(value)


def _check(flag: AxisFlag, value: Any) -> None:
    """The flag's own constraint, with the message prefixed by ``--grid``."""
    try:
        if flag.choices is not None and value is not None and value not in list(flag.choices()):
            raise FlagError(f"{flag.name} {value!r} is not one of: {', '.join(flag.choices())}")
        if flag.check is not None:
            flag.check(flag.name, value)
    except FlagError as exc:
        raise FlagError(f"--grid {exc}") from None


def default_axes() -> tuple[list[Axis], list[str]]:
    """The default grid's axes, and a note for each default axis (or value) this kvplan cannot
    sweep: a flag it does not have yet is left out, a value its flag refuses is dropped."""
    axes, notes = [], []
    from simulator.cli.server_flags import HICACHE_IN_SERVED_RUNS

    for name, spec in DEFAULT_GRID:
        flag = resolve_flag(name)
        if flag is None:
            notes.append(f"{name} is not a server flag of this kvplan yet; the default grid leaves it out")
            continue
        if flag.field.startswith("hicache.") and not HICACHE_IN_SERVED_RUNS:
            notes.append(f"{name}: served runs do not model HiCache yet; the default grid leaves it out")
            continue
        values: list[Any] = []
        for item in spec.split(","):
            try:
                values.extend(parse_values(flag, item))
            except FlagError as exc:
                notes.append(f"default grid: {exc}; value left out")
        if values:
            axes.append(Axis(flag, tuple(values)))
    return axes, notes


def check_axes(axes: Sequence[Axis], fixed: dict[str, Any]) -> None:
    """No flag twice, and no axis over a flag also given a fixed (non-default) value."""
    seen: set[str] = set()
    for axis in axes:
        field = axis.flag.field
        if field in seen:
            raise FlagError(f"--grid {axis.flag.name}: given as two axes")
        seen.add(field)
        given = _fixed_value(fixed, field)
        if given is not _UNSET and given != field_default(field):
            raise FlagError(f"--grid {axis.flag.name}: also given a fixed value ({given!r}); give one")


_UNSET = object()


def _fixed_value(fixed: dict[str, Any], field: str) -> Any:
    """The fixed value of ``field`` (a grouped one is read from its group's dataclass)."""
    group, _, name = field.rpartition(".")
    if not group:
        return fixed.get(field, _UNSET)
    return getattr(fixed[group], name) if group in fixed else _UNSET


def grid_points(axes: Sequence[Axis]) -> Iterator[dict[str, Any]]:
    """Every combination, as SimConfig field -> value, the last axis varying fastest."""
    for combo in itertools.product(*(a.values for a in axes)):
        yield {a.flag.field: v for a, v in zip(axes, combo, strict=True)}
