"""SGLang launch flags kvplan does not model: accepted by name, refused when set.

A user who copies an SGLang launch line into kvplan must not get results that silently leave out
speculative decoding, DP attention or LoRA. Each flag here is a real option of the commands that
take the server flags (so the name is recognised and listed in ``--help``); any value other than
SGLang's default is refused with an error that says what is not modelled. A command that models a
flag itself (``pools --kv-cache-dtype``) keeps its own option and does not get this one.
Names and defaults: SGLang 0.5.23 ``arg_groups/fields/*.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simulator.errors import FlagError

UNMODELLED_PANEL = "SGLang flags kvplan does not model (refused when set)"


@dataclass(frozen=True)
class UnmodelledFlag:
    """One SGLang flag: its spelling, its type and default (SGLang's), and what kvplan lacks."""

    flag: str
    type: type
    default: Any
    what: str

    @property
    def param(self) -> str:
        """The typer parameter name (prefixed so it never clashes with a command's own)."""
        return "sglang_" + self.flag.lstrip("-").replace("-", "_")

    @property
    def field(self) -> str:
        """SGLang's ServerArgs field."""
        return self.flag.lstrip("-").replace("-", "_")

    def refuse(self, value: Any) -> None:
        """Raise :class:`FlagError` when ``value`` is not SGLang's default."""
        if value is None or value == self.default or (self.type is bool and not value):
            return
        shown = "" if self.type is bool else f" {value}"
        raise FlagError(
            f"{self.flag}{shown}: {self.what} is not modelled by kvplan; remove the flag "
            "(its results would leave it out)"
        )


UNMODELLED_FLAGS: tuple[UnmodelledFlag, ...] = (
    UnmodelledFlag("--speculative-algorithm", str, None, "speculative decoding (draft KV and verify steps)"),
    UnmodelledFlag("--enable-dp-attention", bool, False, "data-parallel attention"),
    UnmodelledFlag("--dp-size", int, 1, "data parallelism (kvplan simulates one DP rank)"),
    UnmodelledFlag("--pp-size", int, 1, "pipeline parallelism"),
    UnmodelledFlag("--ep-size", int, 1, "expert parallelism (weights per rank)"),
    UnmodelledFlag("--nnodes", int, 1, "a multi-node server"),
    UnmodelledFlag("--enable-mixed-chunk", bool, False, "mixing decode requests into prefill batches"),
    UnmodelledFlag("--enable-two-batch-overlap", bool, False, "two-batch overlap"),
    UnmodelledFlag("--enable-lora", bool, False, "LoRA adapters"),
    UnmodelledFlag("--lora-paths", str, None, "LoRA adapters"),
    UnmodelledFlag("--disaggregation-mode", str, "null", "prefill/decode disaggregation"),
    UnmodelledFlag(
        "--kv-cache-dtype",
        str,
        "auto",
        "a KV dtype other than the model's in the served run (`kvplan pools`)",
    ),
    UnmodelledFlag(
        "--attention-backend", str, None, "choosing the attention backend in the served run (`kvplan pools`)"
    ),
)


def refuse_unmodelled(values: dict[str, Any]) -> None:
    """Refuse every unmodelled flag in ``values`` (typer parameter name -> value) that is set."""
    for flag in UNMODELLED_FLAGS:
        if flag.param in values:
            flag.refuse(values[flag.param])
