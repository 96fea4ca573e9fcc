"""Every flag value of every command checked in one place, before any work starts.

:func:`validate_flags` runs inside :func:`simulator.cli.server_flags.server_options`, which every
command with server flags goes through, so one table drives all of them: the server flags carry
their :class:`~simulator.cli.checks.Check` in ``SERVER_FLAGS``; the commands' own flags share the
table :data:`COMMAND_CHECKS` below (a flag has one meaning wherever it appears). Then the
combinations (``--time-scale`` with ``--request-rate``), the TP split of the model's heads,
the output paths, and the SGLang flags kvplan does not model. Every refusal is a
:class:`~simulator.errors.FlagError`: one line naming the flag.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from simulator.cli.checks import (
    AT_LEAST_1,
    FRACTION,
    NON_NEGATIVE,
    POSITIVE,
    RATE,
    SEED,
    TOKENS,
    TOKENS_OR_ZERO,
    Check,
)
from simulator.cli.output_files import check_out_dir, check_out_file
from simulator.cli.unmodelled import refuse_unmodelled
from simulator.errors import FlagError
from simulator.server_args import ATTENTION_BACKENDS


class _Flag(Protocol):
    field: str
    check: Check | None

    @property
    def name(self) -> str: ...


# Command flags (typer parameter name -> (flag, check)); the same name means the same flag.
COMMAND_CHECKS: dict[str, tuple[str, Check]] = {
    "limit": ("--limit", AT_LEAST_1),
    "block_size": ("--block-size", TOKENS),
    "time_scale": ("--time-scale", NON_NEGATIVE),
    "request_rate": ("--request-rate", RATE),
    "think_time": ("--think-time", NON_NEGATIVE),
    "seed": ("--seed", SEED),
    "context_length": ("--context-length", TOKENS),
    "hicache_ratio": ("--hicache-ratio", POSITIVE),
    "hicache_size": ("--hicache-size", NON_NEGATIVE),
    "attention_backend": ("--attention-backend", Check(choices=lambda: ATTENTION_BACKENDS)),
    "full_tokens": ("--full-tokens", TOKENS),
    "swa_tokens": ("--swa-tokens", TOKENS),
    "window": ("--window", TOKENS),
    "num_clients": ("--num-clients", AT_LEAST_1),
    "num_rounds": ("--num-rounds", AT_LEAST_1),
    "min_rounds": ("--min-rounds", NON_NEGATIVE),
    "max_rounds": ("--max-rounds", NON_NEGATIVE),
    "request_length": ("--request-length", TOKENS),
    # The server refuses a request without output tokens (simulator/engine: non-empty outputs).
    "output_length": ("--output-length", TOKENS),
    "sub_question_input_length": ("--sub-question-input-length", TOKENS_OR_ZERO),
    "range_ratio": ("--range-ratio", FRACTION),
    "max_parallel": ("--max-parallel", AT_LEAST_1),
}


def validate_flags(values: Mapping[str, Any], flags: Iterable[_Flag]) -> None:
    """Refuse, with one line naming the flag, any value or combination in ``values`` (a
    command's typer parameters by name) that kvplan cannot run."""
    for flag in flags:
        if flag.check is not None and flag.field in values:
            flag.check(flag.name, values[flag.field])
    for param, (name, check) in COMMAND_CHECKS.items():
        if param in values:
            check(name, values[param])
    refuse_unmodelled(values)
    _check_combinations(values)
    if values.get("out") is not None:
        check_out_dir(Path(values["out"]))
    if values.get("record_ops") is not None:
        check_out_file(Path(values["record_ops"]), "--record-ops")


def _check_combinations(values: Mapping[str, Any]) -> None:
    """Flags that are fine alone but not together, or not for the chosen model."""
    rate, scale = values.get("request_rate"), values.get("time_scale")
    if rate is not None and scale is not None and scale != 1.0:
        # `run`: --request-rate replaces the trace's arrival times, which --time-scale scales.
        raise FlagError(
            "--time-scale scales the trace's arrival times, which --request-rate replaces with "
            "Poisson arrivals; give one of the two"
        )
    if "model" in values and values.get("tp") is not None:
        check_tp_split(values["model"], int(values["tp"]))


def check_tp_split(model_name: str, tp: int) -> None:
    """SGLang shards attention heads over the TP ranks and refuses a split that does not divide
    them (layers/linear.py::QKVParallelLinear.__init__ -> distributed/utils.py::divide): query
    heads must divide by tp; KV heads divide by tp, or tp by KV heads when there are fewer."""
    from simulator.models import load_model

    model = load_model(model_name)
    heads = model.num_attention_heads
    if heads and heads % tp:
        raise FlagError(
            f"--tp {tp}: {model.name} has {heads} attention heads, not divisible by {tp} "
            "(SGLang refuses the split)"
        )
    for kv in {model.num_kv_heads, model.swa_num_kv_heads} - {0}:
        if (tp >= kv and tp % kv) or (tp < kv and kv % tp):
            raise FlagError(
                f"--tp {tp}: {model.name} has {kv} KV heads, which cannot be split over {tp} ranks "
                "(SGLang refuses the split)"
            )
