"""Step-time cost model: how long one prefill or decode forward of an SGLang server takes.

The simulator never runs a model; it charges each scheduled forward step a duration from this
module. The default is a roofline built from the model and GPU presets, per tensor-parallel (TP)
rank. A forward is split into groups of kernels that run one after another, and each group costs
``max(FLOPs / achievable FLOP/s, bytes / achievable HBM bandwidth)``:

* ``dense``  - attention projections, dense MLPs, shared experts, router, lm_head: every weight is
  read once per step; FLOPs are ``2 x params x tokens`` (lm_head only on each request's last token
  in prefill, which is what SGLang computes logits for).
* ``moe``    - routed experts: only the experts the step's tokens select are read. With ``N``
  tokens each picking ``k`` of ``E`` experts, the expected number of distinct experts per layer
  under uniform routing is ``E x (1 - (1 - k/E)^N)``; real routers are skewed, which touches fewer
  experts, so this is an upper bound on bytes. Experts are TP-sharded (SGLang's default, no EP).
* ``attn_full`` / ``attn_swa`` - attention over the KV cache on full and sliding-window layers:
  FLOPs ``2 x q_heads x (d_k + d_v)`` per (query, key) pair, bytes = KV read + KV written.
  SWA layers see at most ``window`` keys per query, so their cost stops growing with context.

Then ``allreduce`` (TP > 1: ``allreduces_per_layer`` per layer, each ``latency + 2(TP-1)/TP x
activation bytes / bus bandwidth``) and ``overhead`` (per step, per layer, per request: scheduler,
kernel launch floors, sampling) are added. Summing per-group maxima rather than taking one global
max matters because the groups are sequential kernels: a decode step's attention is memory-bound
even when its GEMMs are not, and a global max would hide one under the other.

Every coefficient (efficiencies, peaks, overheads, all-reduce figures) and every derived model
quantity (parameter split, bytes per parameter, hidden size, KV bytes) can be replaced by a
calibration profile (JSON, schema in docs/cost-model.md, read by
:func:`~simulator.cost.profile.load_profile`). A later issue measures profiles on real GPUs with
``gpu_replay``; until then the defaults are estimates.

The model is pure and deterministic: no simulation state, no globals, no randomness. Formulas and
the worked example are in docs/cost-model.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from simulator.cost.coefficients import CostCoefficients, allreduce_bus_source
from simulator.cost.geometry import INT_GEOMETRY_FIELDS, ModelCostGeometry, derive_geometry
from simulator.cost.moe_tiles import padded_tokens
from simulator.cost.prefill_sums import capped_triangle, prefill_sums_loop
from simulator.cost.profile import COEFFICIENT_KEYS, profile_mismatches, validate_profile
from simulator.cost.step_prices import (
    StepPrices,
    attention_parts,
    decode_seconds,
    fixed_parts,
    linear_parts,
    prefill_parts,
    prefill_seconds,
)
from simulator.errors import ConfigError
from simulator.gpus import GpuSpec
from simulator.models import ModelSpec

# Bytes of one activation element (BF16 hidden states) moved by TP all-reduces.
_ACT_BYTES = 2

_PARTS = ("dense", "moe", "attn_full", "attn_swa", "allreduce", "overhead")

#: Prefill batches of at most this many requests are summed in plain Python (faster than numpy).
_SMALL_BATCH = 32


@dataclass(frozen=True)
class _Rates:
    """Per-rank constants folded once so the per-step arithmetic is a handful of float ops."""

    # dense group
    dense_flops_per_token: float
    lm_head_flops_per_request: float
    dense_bytes: float
    # moe group
    moe_flops_per_token: float
    expert_bytes: float  # one expert index, all layers, one rank
    num_experts: float
    miss_per_token: float  # 1 - k/E
    experts_per_token: int  # k
    # attention (per (query, key) pair summed over layers of that kind; per token of KV)
    full_flops_per_pair: float
    swa_flops_per_pair: float
    full_kv_bytes: float
    swa_kv_bytes: float
    # rates (FLOP/s and B/s)
    dense_flops_rate: float
    moe_flops_rate: float
    attn_flops_rate: float
    weight_bw: float
    kv_bw: float
    # all-reduce
    allreduce_count: float
    allreduce_latency: float
    allreduce_s_per_token: float
    # step-shape terms beyond the roofline (0 = off: the plain roofline)
    dense_unhidden: float
    moe_unhidden: float
    prefill_attn_unhidden: float
    moe_half_tokens: float
    moe_tile: int  # row tile of the prefill MoE grouped GEMM, 0 = off
    moe_decode_tile: int  # the same for decode


@dataclass(frozen=True, kw_only=True)
class CostModel:
    """Roofline step-time model of one SGLang server (one TP group).

    Build it with :meth:`from_presets`. All times are seconds of one forward on the whole TP
    group (ranks run in lockstep, so one rank's time is the step's time).
    """

    model_name: str
    gpu_name: str
    tp: int
    coefficients: CostCoefficients
    geometry: ModelCostGeometry
    profile_name: str | None = None
    profile_provenance: Mapping[str, Any] = field(default_factory=dict)
    coefficient_sources: Mapping[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    _r: _Rates = field(init=False, repr=False, compare=False)
    _h: StepPrices = field(init=False, repr=False, compare=False)  # the scalar path's constants

    def __post_init__(self) -> None:
        if self.tp <= 0:
            raise ConfigError(f"tp must be positive, got {self.tp}")
        c, g, tp = self.coefficients, self.geometry, self.tp
        if c.peak_tflops is None or c.hbm_bandwidth_gbps is None or c.allreduce_bus_gbps is None:
            raise ConfigError("CostModel needs resolved coefficients (use CostCoefficients.resolved)")
        peak = c.peak_tflops * 1e12
        hbm = c.hbm_bandwidth_gbps * 1e9
        q_heads_rank = max(1.0, g.num_attention_heads / tp)
        rates = _Rates(
            dense_flops_per_token=2.0 * (g.dense_params - g.lm_head_params) / tp,
            lm_head_flops_per_request=2.0 * g.lm_head_params / tp,
            dense_bytes=g.dense_params * g.dense_bytes_per_param / tp,
            moe_flops_per_token=2.0 * g.experts_per_token * g.params_per_expert / tp,
            expert_bytes=g.params_per_expert * g.expert_bytes_per_param / tp,
            num_experts=float(g.num_experts),
            miss_per_token=1.0 - g.experts_per_token / g.num_experts if g.num_experts else 1.0,
            experts_per_token=int(g.experts_per_token),
            full_flops_per_pair=2.0
            * q_heads_rank
            * (g.full_qk_head_dim + g.full_v_head_dim)
            * g.num_full_layers,
            swa_flops_per_pair=2.0 * q_heads_rank * (g.swa_qk_head_dim + g.swa_v_head_dim) * g.num_swa_layers,
            full_kv_bytes=g.full_kv_bytes_per_token_per_rank,
            swa_kv_bytes=g.swa_kv_bytes_per_token_per_rank,
            dense_flops_rate=peak * c.dense_flops_efficiency,
            moe_flops_rate=peak * c.moe_flops_efficiency,
            attn_flops_rate=peak * c.attention_flops_efficiency,
            weight_bw=hbm * c.weight_bandwidth_efficiency,
            kv_bw=hbm * c.kv_bandwidth_efficiency,
            allreduce_count=c.allreduces_per_layer * g.num_layers if tp > 1 else 0.0,
            allreduce_latency=c.allreduce_latency_s if tp > 1 else 0.0,
            allreduce_s_per_token=(
                2.0 * (tp - 1) / tp * g.hidden_size * _ACT_BYTES / (c.allreduce_bus_gbps * 1e9)
                if tp > 1
                else 0.0
            ),
            dense_unhidden=c.dense_unhidden_fraction,
            moe_unhidden=c.moe_unhidden_fraction,
            prefill_attn_unhidden=c.prefill_attention_unhidden_fraction,
            moe_half_tokens=c.moe_flops_half_tokens,
            moe_tile=int(c.moe_tile_tokens),
            moe_decode_tile=int(c.moe_decode_tile_tokens),
        )
        object.__setattr__(self, "_r", rates)
        object.__setattr__(self, "_h", StepPrices(rates, c, g))

    # ---- construction --------------------------------------------------------------------------

    @classmethod
    def from_presets(
        cls,
        model: ModelSpec,
        gpu: GpuSpec,
        tp: int,
        profile: Mapping[str, Any] | None = None,
        *,
        kv_dtype_bytes: int | None = None,
    ) -> CostModel:
        """The roofline for ``model`` on ``tp`` GPUs of type ``gpu``, with a calibration profile's
        coefficients and model overrides applied on top of the defaults. ``kv_dtype_bytes``
        overrides the model's KV dtype (``--kv-cache-dtype fp8_e4m3`` gives 1)."""
        geometry, notes = derive_geometry(model, tp, kv_dtype_bytes=kv_dtype_bytes)
        coeffs = CostCoefficients()
        sources = {name: "default" for name in COEFFICIENT_KEYS}
        for name in ("peak_tflops", "hbm_bandwidth_gbps"):
            sources[name] = f"gpu preset {gpu.name}"
        sources["allreduce_bus_gbps"] = allreduce_bus_source(gpu)
        prof_name: str | None = None
        provenance: dict[str, Any] = {}
        if profile is not None:
            checked = validate_profile(profile)
            prof_name = checked.get("name")
            provenance = dict(checked.get("provenance", {}))
            label = f"profile {prof_name}" if prof_name else "profile"
            if checked["coefficients"]:
                coeffs = replace(coeffs, **checked["coefficients"])
                for key in checked["coefficients"]:
                    sources[key] = label
            if checked["model"]:
                overrides = {
                    k: (int(v) if k in INT_GEOMETRY_FIELDS else v) for k, v in checked["model"].items()
                }
                geometry = replace(geometry, **overrides)
                notes.append(f"model quantities overridden by {label}: {', '.join(sorted(overrides))}")
            notes.extend(profile_mismatches(provenance, model, gpu, tp))
        return cls(
            model_name=model.name,
            gpu_name=gpu.name,
            tp=tp,
            coefficients=coeffs.resolved(gpu),
            geometry=geometry,
            profile_name=prof_name,
            profile_provenance=provenance,
            coefficient_sources=sources,
            notes=tuple(notes),
        )

    # ---- the roofline --------------------------------------------------------------------------

    def _linear_parts(self, tokens: float, requests: float, tile: int) -> tuple[float, float]:
        """(dense, moe) seconds for a forward of ``tokens`` tokens from ``requests`` requests.

        Each group costs ``max(compute, memory)``, plus ``unhidden x min(compute, memory)`` when a
        profile sets the group's unhidden fraction; the MoE's FLOP time is that of ``tokens +
        moe_flops_half_tokens`` tokens (an efficiency ``n / (n + half)`` that saturates with n), where
        a ``tile`` (a profile's ``moe_tile_tokens`` for prefill, ``moe_decode_tile_tokens`` for
        decode) first rounds each expert's rows up to whole tiles (:meth:`moe_flop_tokens`)."""
        return linear_parts(self._h, tokens, requests, tile)

    def _fixed_parts(self, tokens: float, requests: float, phase: str) -> tuple[float, float]:
        """(allreduce, overhead) seconds."""
        return fixed_parts(self._h, tokens, requests, phase == "decode")

    def _attention_parts(
        self, full_pairs: Any, swa_pairs: Any, full_read: Any, swa_read: Any, written: float
    ) -> Any:
        """(attn_full, attn_swa) seconds; the pair and read arguments may be floats or arrays (the
        same operations either way, so decode_times matches decode_time bit for bit)."""
        if not (isinstance(full_pairs, np.ndarray) or isinstance(swa_pairs, np.ndarray)):
            return attention_parts(self._h, full_pairs, swa_pairs, full_read, swa_read, written)
        r, mx = self._r, np.maximum  # step_prices.attention_parts's formulas on arrays
        attn_full = mx(
            full_pairs * r.full_flops_per_pair / r.attn_flops_rate,
            (full_read + written) * r.full_kv_bytes / r.kv_bw,
        )
        attn_swa = mx(
            swa_pairs * r.swa_flops_per_pair / r.attn_flops_rate,
            (swa_read + written) * r.swa_kv_bytes / r.kv_bw,
        )
        return attn_full, attn_swa

    def _decode_parts(self, bs: int, full_ctx: Any, swa_ctx: Any) -> tuple[Any, ...]:
        n = float(bs)
        dense, moe = self._linear_parts(n, n, self._r.moe_decode_tile)
        attn_full, attn_swa = self._attention_parts(full_ctx, swa_ctx, full_ctx, swa_ctx, n)
        allreduce, overhead = self._fixed_parts(n, n, "decode")
        return dense, moe, attn_full, attn_swa, allreduce, overhead

    @staticmethod
    def _sum(parts: tuple[Any, ...]) -> Any:
        dense, moe, attn_full, attn_swa, allreduce, overhead = parts
        return ((((dense + moe) + attn_full) + attn_swa) + allreduce) + overhead

    def decode_time(self, bs: int, full_ctx_tokens: int, swa_ctx_tokens: int) -> float:
        """Seconds for one decode forward of ``bs`` requests. ``full_ctx_tokens`` = Σ sequence
        lengths (KV the full layers read); ``swa_ctx_tokens`` = Σ min(sequence length, window)
        (KV the SWA layers read). ``bs == 0`` costs nothing."""
        if bs <= 0:
            if bs < 0:
                raise ValueError(f"decode batch size must be >= 0, got {bs}")
            return 0.0
        if full_ctx_tokens < 0 or swa_ctx_tokens < 0:
            raise ValueError(f"context tokens must be >= 0, got {full_ctx_tokens}, {swa_ctx_tokens}")
        return decode_seconds(self._h, bs, float(full_ctx_tokens), float(swa_ctx_tokens))

    def decode_terms(self, bs: int) -> tuple[float, float, float, float, float, float, float]:
        """A decode step of ``bs`` requests as ``base + max(fa*x, fb*(x+bs)) + max(sa*y, sb*(y+bs))``.

        Returns ``(dense+moe, fa, fb, sa, sb, allreduce, overhead)``, where ``x`` / ``y`` are the
        FULL / SWA context sums, so a simulator can price many steps with a few array operations
        (:class:`~simulator.engine.decode_clock.DecodeClock`). Same roofline as :meth:`decode_time`
        up to float rounding.
        """
        n = float(bs)
        dense, moe = self._linear_parts(n, n, self._r.moe_decode_tile)
        allreduce, overhead = self._fixed_parts(n, n, "decode")
        r = self._r
        return (
            dense + moe,
            r.full_flops_per_pair / r.attn_flops_rate,
            r.full_kv_bytes / r.kv_bw,
            r.swa_flops_per_pair / r.attn_flops_rate,
            r.swa_kv_bytes / r.kv_bw,
            allreduce,
            overhead,
        )

    def decode_times(
        self, bs: int, full_ctx0: int, swa_ctx0: int, k: int, full_growth: int, swa_growth: int
    ) -> np.ndarray:
        """Seconds of ``k`` consecutive decode steps of a fixed batch whose context sums grow by
        ``full_growth`` / ``swa_growth`` tokens per step (step ``i`` sees ``full_ctx0 + i x
        full_growth``). Equal, element for element, to calling :meth:`decode_time` ``k`` times."""
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        if bs <= 0:
            if bs < 0:
                raise ValueError(f"decode batch size must be >= 0, got {bs}")
            return np.zeros(k, dtype=np.float64)
        steps = np.arange(k, dtype=np.float64)
        full = float(full_ctx0) + steps * float(full_growth)
        swa = float(swa_ctx0) + steps * float(swa_growth)
        if k and (min(full[0], full[-1]) < 0 or min(swa[0], swa[-1]) < 0):
            raise ValueError("context tokens must stay >= 0 over the k steps")
        out = self._sum(self._decode_parts(bs, full, swa))
        return np.asarray(out, dtype=np.float64)

    def _prefill_inputs(
        self, extend_lens: Any, prefix_lens: Any
    ) -> tuple[float, float, float, float, float, float]:
        """(tokens, requests, full pairs, SWA pairs, full KV read, SWA KV read) of a prefill batch.

        Causal full attention: the query at position n (1-based) sees n keys, so a request that
        extends from p to p + e does sum_{n=p+1}^{p+e} n = e p + e (e + 1) / 2 (query, key) pairs
        and reads p + e tokens of KV. SWA layers: the query at n sees min(n, w) keys (the decode
        convention, swa_ctx = Σ min(len, w)) and the request reads min(p, w) + e tokens.
        Batches up to :data:`_SMALL_BATCH` requests take a plain-Python loop (numpy's per-call cost
        dominates there); larger ones the vectorised form of the same sums.
        """
        w = self.geometry.sliding_window if self.geometry.num_swa_layers else None
        if type(extend_lens) is list and type(prefix_lens) is list and len(extend_lens) <= _SMALL_BATCH:
            # the simulator's per-batch call: skip the round trip through numpy
            if len(extend_lens) != len(prefix_lens):
                raise ValueError(
                    f"extend_lens and prefix_lens differ in length: {len(extend_lens)} vs {len(prefix_lens)}"
                )
            return prefill_sums_loop(extend_lens, prefix_lens, w)
        e_arr = np.asarray(extend_lens, dtype=np.float64).ravel()
        p_arr = np.asarray(prefix_lens, dtype=np.float64).ravel()
        if e_arr.shape != p_arr.shape:
            raise ValueError(f"extend_lens and prefix_lens differ in length: {e_arr.size} vs {p_arr.size}")
        if e_arr.size <= _SMALL_BATCH:
            return prefill_sums_loop(e_arr.tolist(), p_arr.tolist(), w)
        if e_arr.min() < 0 or p_arr.min() < 0:
            raise ValueError("extend and prefix lengths must be >= 0")
        e, p = e_arr, p_arr
        end = p + e
        tokens = float(e.sum())
        requests = float(np.count_nonzero(e))
        full_pairs = float((e * p + e * (e + 1.0) * 0.5).sum())
        full_read = float(end.sum())
        if w is not None:
            swa_pairs = float((capped_triangle(end, w) - capped_triangle(p, w)).sum())
            swa_read = float((np.minimum(p, w) + e).sum())
        else:
            swa_pairs, swa_read = full_pairs, full_read
        return tokens, requests, full_pairs, swa_pairs, full_read, swa_read

    def _prefill_parts(self, extend_lens: Any, prefix_lens: Any) -> tuple[float, ...]:
        tokens, requests, full_pairs, swa_pairs, full_read, swa_read = self._prefill_inputs(
            extend_lens, prefix_lens
        )
        return prefill_parts(self._h, tokens, requests, full_pairs, swa_pairs, full_read, swa_read)

    def prefill_time(self, extend_lens: Any, prefix_lens: Any) -> float:
        """Seconds for one prefill (extend) forward: request ``i`` computes ``extend_lens[i]`` new
        tokens on top of ``prefix_lens[i]`` cached ones (prefix KV is read, not recomputed). A
        batch with no extend tokens costs nothing."""
        tokens, requests, full_pairs, swa_pairs, full_read, swa_read = self._prefill_inputs(
            extend_lens, prefix_lens
        )
        return prefill_seconds(self._h, tokens, requests, full_pairs, swa_pairs, full_read, swa_read)

    # ---- reporting -----------------------------------------------------------------------------

    def decode_breakdown(self, bs: int, full_ctx_tokens: int, swa_ctx_tokens: int) -> dict[str, float]:
        """Seconds per kernel group of one decode step (sums to :meth:`decode_time`)."""
        if bs <= 0:
            return dict.fromkeys(_PARTS, 0.0)
        parts = self._decode_parts(bs, float(full_ctx_tokens), float(swa_ctx_tokens))
        return {name: float(v) for name, v in zip(_PARTS, parts, strict=True)}

    def prefill_breakdown(self, extend_lens: Any, prefix_lens: Any) -> dict[str, float]:
        """Seconds per kernel group of one prefill step (sums to :meth:`prefill_time`)."""
        parts = self._prefill_parts(extend_lens, prefix_lens)
        return {name: float(v) for name, v in zip(_PARTS, parts, strict=True)}

    def moe_flop_tokens(self, tokens: float, phase: str = "prefill") -> float:
        """The token count the MoE FLOP time of a ``phase`` step is priced at: ``tokens``, or with
        a profile's tile for that phase the tokens whose routed rows equal the tiled kernel's rows."""
        r = self._r
        tile = r.moe_decode_tile if phase == "decode" else r.moe_tile
        if not (r.num_experts and tile):
            return float(tokens)
        return padded_tokens(tokens, int(r.num_experts), r.experts_per_token, tile)

    def experts_touched(self, tokens: int) -> float:
        """Expected distinct experts per MoE layer read by a forward of ``tokens`` tokens
        (uniform routing: E x (1 - (1 - k/E)^tokens))."""
        r = self._r
        return r.num_experts * (1.0 - r.miss_per_token ** float(tokens)) if r.num_experts else 0.0

    def describe(self) -> dict[str, Any]:
        """Every coefficient, derived model quantity and per-rank constant, with where each came
        from, as plain data for reports and ``--json`` output."""
        c, g, r = self.coefficients, self.geometry, self._r
        coeffs = {
            f.name: {"value": getattr(c, f.name), "source": self.coefficient_sources.get(f.name, "default")}
            for f in fields(c)
        }
        geometry = {f.name: getattr(g, f.name) for f in fields(g)}
        per_rank = {
            "dense_weight_bytes": r.dense_bytes,
            "all_expert_weight_bytes": r.expert_bytes * r.num_experts,
            "weight_bytes": r.dense_bytes + r.expert_bytes * r.num_experts,
            "dense_flops_per_token": r.dense_flops_per_token,
            "moe_flops_per_token": r.moe_flops_per_token,
            "full_kv_bytes_per_token": r.full_kv_bytes,
            "swa_kv_bytes_per_token": r.swa_kv_bytes,
            "attention_flops_per_full_pair": r.full_flops_per_pair,
            "attention_flops_per_swa_pair": r.swa_flops_per_pair,
            "achievable_dense_tflops": r.dense_flops_rate / 1e12,
            "achievable_moe_tflops": r.moe_flops_rate / 1e12,
            "achievable_attention_tflops": r.attn_flops_rate / 1e12,
            "achievable_weight_bandwidth_gbps": r.weight_bw / 1e9,
            "achievable_kv_bandwidth_gbps": r.kv_bw / 1e9,
            "allreduces_per_step": r.allreduce_count,
        }
        return {
            "kind": "roofline" if self.profile_name is None else "roofline+profile",
            "model": self.model_name,
            "gpu": self.gpu_name,
            "tp": self.tp,
            "profile": {"name": self.profile_name, "provenance": dict(self.profile_provenance)},
            "coefficients": coeffs,
            "geometry": geometry,
            "per_rank": per_rank,
            "notes": list(self.notes),
        }
