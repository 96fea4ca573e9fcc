"""Host bytes one cached sequence takes under HiCache, with and without SGLang's one-window SWA
backup: the arithmetic behind seed 003's "SWA makes about 5x more tokens cacheable per host byte".

SGLang backs up a node's FULL KV whole, but its SWA KV only within one sliding window of the
node (``components/swa.py::_collect_unbacked_swa_nodes_in_window``: walk up over device-only SWA
nodes until ``covered >= sliding_window_size``). A sequence of S tokens therefore costs the host
``S x full_bytes_per_token + W' x swa_bytes_per_token`` with ``W' = min(S, ceil_page(W))``
instead of ``S x (full + swa)`` if every layer kept the whole sequence. The per-token bytes are
the host pools' (they mirror the device pools as SGLang allocates them, after its HiCache
overrides: Step-3.5 and Gemma 2/3 run non-hybrid, so they get no SWA saving at all).
``W'`` is a lower bound: SGLang backs up whole tree nodes and a finished request may still hold
up to one SWA eviction interval beyond its window on device.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from policies.swa_eviction import SWA_EVICTION_INTERVAL
from simulator.models import ModelSpec
from simulator.request_kv import ceil_page
from simulator.server_args import ServerArgs, resolve_server_args
from simulator.sizing.mha import Split, allocated_pools, mha_cells


@dataclass(frozen=True)
class HostBytesPerSequence:
    """One sequence's host footprint (one TP rank) with one-window SWA backup and without it."""

    model: str
    hybrid_swa: bool
    window: int | None
    seq_len: int
    page_size: int
    full_bytes_per_token: int  # host full pool (every layer when not hybrid)
    swa_bytes_per_token: int  # host SWA pool (0 when not hybrid)
    swa_tokens_backed_up: int  # one window, page-rounded (seq_len when not hybrid)

    @property
    def bytes_one_window(self) -> int:
        """Host bytes with SGLang's one-window SWA backup."""
        return self.seq_len * self.full_bytes_per_token + self.swa_tokens_backed_up * self.swa_bytes_per_token

    @property
    def bytes_whole_sequence(self) -> int:
        """Host bytes if the SWA layers kept the whole sequence too."""
        return self.seq_len * (self.full_bytes_per_token + self.swa_bytes_per_token)

    @property
    def cacheable_multiplier(self) -> float:
        """How many times more tokens fit per host byte with the one-window backup."""
        return self.bytes_whole_sequence / self.bytes_one_window


def host_bytes_per_sequence(
    model: ModelSpec, seq_len: int, *, window: int | None = None, tp: int = 1, page_size: int = 1
) -> HostBytesPerSequence:
    """Host footprint of one ``seq_len``-token sequence of ``model`` under HiCache; ``window``
    overrides the model's sliding window (seed 003 states its claim for a 4096-token window)."""
    if window is not None:
        model = dataclasses.replace(model, sliding_window=window)
    args = resolve_server_args(
        model, None, ServerArgs(tp_size=tp, page_size=page_size, enable_hierarchical_cache=True)
    )
    cells = mha_cells(model, args, SWA_EVICTION_INTERVAL)
    full, swa = allocated_pools(model, args, cells, Split(page_size, page_size, page_size), [])
    if not args.hybrid_swa:
        return HostBytesPerSequence(
            model.name, False, model.sliding_window, seq_len, page_size, full.bytes_per_token, 0, seq_len
        )
    assert model.sliding_window is not None
    swa_tokens = min(seq_len, ceil_page(model.sliding_window, page_size))
    return HostBytesPerSequence(
        model.name,
        True,
        model.sliding_window,
        seq_len,
        page_size,
        full.bytes_per_token,
        swa.bytes_per_token,
        swa_tokens,
    )
