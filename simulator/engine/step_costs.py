"""Forward prices the scheduler asks for again and again, memoised per server instance.

The cost model is pure, so a price can be kept: one-request prefill batches repeat the same
(extend, prefix) pairs (chunks of long prompts), and a decode jump asks for the step terms of
each batch size it meets. Each :class:`StepCosts` owns its memo; nothing is shared between
servers (or between runs in one process).
"""

from __future__ import annotations

PREFILL_MEMO_SIZE = 1 << 16  # one-request prefill prices kept (cleared when full)


class StepCosts:
    """``cost.prefill_time`` and ``cost.decode_terms`` with per-instance memos."""

    __slots__ = ("cost", "memo_size", "_prefill_memo", "_terms_memo")

    def __init__(self, cost_model, memo_size: int = PREFILL_MEMO_SIZE) -> None:
        self.cost = cost_model
        self.memo_size = memo_size
        self._prefill_memo: dict[tuple[int, int], float] = {}
        self._terms_memo: dict[int, tuple[float, float, float, float, float]] = {}

    def prefill_time(self, extend: list[int], prefix: list[int]) -> float:
        """``cost.prefill_time``, memoised for one-request batches (most of them)."""
        if len(extend) != 1:
            return self.cost.prefill_time(extend, prefix)
        key = (extend[0], prefix[0])
        memo = self._prefill_memo
        t = memo.get(key)
        if t is None:
            if len(memo) >= self.memo_size:
                memo.clear()
            t = memo[key] = self.cost.prefill_time(extend, prefix)
        return t

    @property
    def prefill_memo_len(self) -> int:
        return len(self._prefill_memo)

    def decode_terms(self, bs: int) -> tuple[float, float, float, float, float]:
        """``(C, fa, fb, sa, sb)`` of a decode step of ``bs`` requests (:class:`DecodeClock`)."""
        terms = self._terms_memo.get(bs)
        if terms is None:
            base, fa, fb, sa, sb, allreduce, overhead = self.cost.decode_terms(bs)
            terms = self._terms_memo[bs] = (base + allreduce + overhead, fa, fb, sa, sb)
        return terms
