"""A stored point's configuration back as a :class:`SimConfig`, and as SGLang launch flags."""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Sequence
from typing import Any

from simulator.engine.config import SimConfig

# Always spelled out in the launch flags: what the server is, and kvplan's default scheduler
# (kvplan models SGLang without the overlap scheduler unless told otherwise).
ALWAYS = ("model", "tp", "page_size", "disable_overlap_schedule")


def sim_config(config: dict[str, Any]) -> SimConfig:
    """The SimConfig of a flattened configuration (``group.field`` keys set the group's
    dataclass); unknown fields (from another kvplan version) are an error, not dropped."""
    plain = {k: v for k, v in config.items() if "." not in k}
    defaults = SimConfig()
    for key, value in config.items():
        if "." in key:
            group, name = key.split(".", 1)
            plain.setdefault(group, {})[name] = value
    for group in [k for k, v in plain.items() if isinstance(v, dict)]:
        plain[group] = dataclasses.replace(getattr(defaults, group), **plain[group])
    return SimConfig(**plain)


def launch_flags(config: dict[str, Any], axes: Sequence[str] = ()) -> dict[str, Any]:
    """SGLang's launch flags for a configuration, in SGLang's spelling: the server's identity
    (``ALWAYS``), every swept field, and every SGLang flag set away from kvplan's default. A
    boolean flag that is on is ``True``; off (SGLang's default) it is left out."""
    from simulator.cli.server_flags import SERVER_FLAGS

    defaults = _flat_defaults()
    flags: dict[str, Any] = {}
    for flag in SERVER_FLAGS:
        name = flag.sglang_name
        key = flag.field if flag.group is None else f"{flag.group}.{flag.field}"
        if name is None or key not in config:
            continue
        value = config[key]
        wanted = key in ALWAYS or key in axes or value != defaults.get(key)
        if not wanted or value is None or value is False:
            continue
        flags[name] = value
    return flags


def _flat_defaults() -> dict[str, Any]:
    from simulator.planner.keys import config_dict
    from simulator.reports.source import flatten_config

    return flatten_config(config_dict(SimConfig()))


def flags_string(flags: dict[str, Any]) -> str:
    """The flags as one command-line string (a ``True`` boolean as the bare flag)."""
    parts: list[str] = []
    for name, value in flags.items():
        parts.append(name)
        if value is not True:
            parts.append(shlex.quote(f"{value:g}" if isinstance(value, float) else str(value)))
    return " ".join(parts)
