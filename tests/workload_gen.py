"""Hypothesis strategies for multi-turn workloads that stress a hybrid-SWA radix cache.

The differential tests need workloads in which the interesting cache paths actually run: full
eviction, SWA eviction that tombstones internal nodes, decode-time SWA frees, and tombstone
healing when a request recomputes a prefix whose SWA was evicted.  Random unrelated requests
rarely reach those paths, so the generator builds *conversations*:

* a few shared system prompts (cross-conversation prefix hits);
* each turn's prompt = previous prompt + previous answer + new user tokens (multi-turn reuse),
  or a *regenerate* (same prompt again) or a *fork* (previous prompt + a different user turn),
  which create node splits and exact re-matches;
* answers that are usually short but sometimes long enough to cross the decode-time SWA
  eviction trigger (window + 128 tokens of decode and more);
* conversation-major, turn-major or shuffled interleavings (short and long reuse distances);
* pool sizes (fixed per :class:`PoolSetting`) tight enough that eviction is routine.

Every request is kept *feasible*: the oracle serves requests one at a time without chunked
prefill, so an uncached prompt that cannot fit the SWA pool next to one window ends in the
allocator's ``Out of memory``.  :meth:`PoolSetting.max_prompt` and
:meth:`PoolSetting.max_total` encode the limits; turns that would exceed them end the
conversation (the prompt) or shorten the answer.  Token contents come from a seeded
``random.Random``, not from Hypothesis draws, so generation stays fast and shrinking works on
the structure (counts, lengths, order) rather than on thousands of token values.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from policies.swa_eviction import SWA_EVICTION_INTERVAL

DECODE_EVICTION_INTERVAL = SWA_EVICTION_INTERVAL
"""SGLANG_SWA_EVICTION_INTERVAL (both versions): tokens (0.5.23) or forward passes (0.5.15)
between decode-time SWA frees."""


def ceil_to(x: int, page: int) -> int:
    """``x`` rounded up to a multiple of ``page``."""
    return -(-x // page) * page


@dataclass(frozen=True, kw_only=True)
class PoolSetting:
    """One fixed cache configuration: page size, pool capacities (tokens) and window.

    One oracle configuration per setting; Hypothesis varies the workload, not the pools."""

    name: str
    page_size: int
    full_tokens: int
    swa_tokens: int
    window: int
    max_context_len: int = 4096

    def __post_init__(self) -> None:
        if self.full_tokens % self.page_size or self.swa_tokens % self.page_size:
            raise ValueError(f"{self.name}: pool sizes must be multiples of page {self.page_size}")
        if self.max_answer(1) < self.long_answer:
            raise ValueError(f"{self.name}: SWA pool {self.swa_tokens} too small for window {self.window}")

    @property
    def window_span(self) -> int:
        """What a request keeps in SWA behind its newest token: 0.5.23's
        ``ceil_page(max(W, P))``, which bounds 0.5.15's ``max(W, P)`` from above."""
        return ceil_to(max(self.window, self.page_size), self.page_size)

    def max_prompt(self) -> int:
        """Longest prompt that can always be prefilled in one step and still decode a short
        answer.  Worst case nothing is cached: the uncached part plus the locked matched prefix
        (never more than the prompt itself) must fit the SWA pool, with page slack."""
        return min(self.swa_tokens - 4 * self.page_size - 1, self.max_total() - 1)

    def max_answer(self, prompt_len: int) -> int:
        """Longest answer that a ``prompt_len``-token prompt can decode without running the SWA
        pool dry, in both versions.

        The binding case is 0.5.15: its checkpoint keeps the prompt's SWA in the tree, and the
        request's SWA lock covers whole nodes up to one window, so a freshly inserted prompt
        node stays SWA-locked in full while the answer decodes.  Decode-time frees come only
        every 128 forward passes and free nothing until ``pre_len - W`` passes the prompt, so
        the answer alone can hold ``W + 129`` SWA slots (plus pages) before the first useful
        free.  If ``prompt + W' + 130 + 4P`` fits the pool any answer works (the full pool then
        bounds it); otherwise the answer must fit beside the locked prompt."""
        p = self.page_size
        full_cap = self.max_total() - prompt_len
        if prompt_len + self.window_span + DECODE_EVICTION_INTERVAL + 2 + 4 * p <= self.swa_tokens:
            return full_cap
        return max(0, min(full_cap, self.swa_tokens - prompt_len - 4 * p))

    def max_total(self) -> int:
        """Largest ``len(prompt) + len(output)``: the full pool (less slack pages) and the
        driver's request-to-token row length."""
        return min(self.full_tokens - 2 * self.page_size, self.max_context_len)

    @property
    def long_answer(self) -> int:
        """Answer length that crosses the 0.5.23 decode-eviction trigger at least once."""
        return self.window_span + DECODE_EVICTION_INTERVAL + 2 * self.page_size

    def as_dict(self) -> dict[str, Any]:
        """Plain-dict form for reports."""
        return dict(
            name=self.name,
            page_size=self.page_size,
            full_tokens=self.full_tokens,
            swa_tokens=self.swa_tokens,
            window=self.window,
            max_context_len=self.max_context_len,
        )


SETTINGS: dict[int, tuple[PoolSetting, ...]] = {
    1: (
        PoolSetting(name="p1-w32", page_size=1, full_tokens=1024, swa_tokens=384, window=32),
        PoolSetting(name="p1-w128", page_size=1, full_tokens=1536, swa_tokens=512, window=128),
    ),
    16: (
        PoolSetting(name="p16-w32", page_size=16, full_tokens=1024, swa_tokens=416, window=32),
        PoolSetting(name="p16-w100", page_size=16, full_tokens=1536, swa_tokens=576, window=100),
    ),
    64: (
        PoolSetting(name="p64-w32", page_size=64, full_tokens=2048, swa_tokens=768, window=32),
        PoolSetting(name="p64-w80", page_size=64, full_tokens=2560, swa_tokens=896, window=80),
    ),
}
"""Per page size, the pool settings the differential tests draw from.  Windows below, equal
to and not a multiple of the page exercise the ``max(W, P)`` / ``ceil_page`` differences
between versions; the full pools hold only a few conversations, so eviction is routine."""


@dataclass
class Workload:
    """A generated workload: requests in serving order, the setting it was sized for, and
    the structural choices (for failure reports)."""

    setting: PoolSetting
    requests: list[dict[str, Any]]
    shape: dict[str, Any] = field(default_factory=dict)

    def replay_requests(self) -> list[tuple[str, list[int], list[int]]]:
        """The ``(rid, input_ids, output_ids)`` form that ``replay_requests`` takes."""
        return [(r["rid"], r["input_ids"], r["output_ids"]) for r in self.requests]

    def to_jsonl(self, path: Path | str) -> Path:
        """Write the oracle's / ``kvplan cache-replay``'s JSONL format."""
        path = Path(path)
        path.write_text("".join(json.dumps(r) + "\n" for r in self.requests))
        return path

    def summary(self) -> str:
        """One line: counts and lengths, for assertion messages."""
        lens = [(len(r["input_ids"]), len(r["output_ids"])) for r in self.requests]
        return f"{self.setting.name}: {len(lens)} requests (prompt, output) {lens} shape {self.shape}"


@dataclass(frozen=True)
class Turn:
    """One turn of a conversation, before tokens are chosen."""

    kind: str  # "continue" | "regenerate" | "fork" | "branch"
    user_len: int
    answer_len: int
    cut: float = 0.5  # "branch": the share of the previous answer kept


@dataclass(frozen=True)
class Plan:
    """The structure of a workload before any token is chosen."""

    style: str
    system_lens: tuple[int, ...]
    conv_system: tuple[int, ...]  # system index of each conversation
    conv_turns: tuple[tuple[Turn, ...], ...]
    order: str  # "conv-major" | "turn-major" | "shuffled" | "phased"
    phases: tuple[tuple[tuple[int, int], ...], ...] = ()  # (conv, turn) lists, for "phased"


def _answer_lengths(setting: PoolSetting) -> st.SearchStrategy[int]:
    """Mostly short answers, sometimes exactly 1 token (finished at prefill: no decode, no
    before_release), sometimes long enough for one or two decode-time SWA frees."""
    long_lo = setting.long_answer
    return st.one_of(
        st.integers(1, 24),
        st.just(1),
        st.integers(long_lo, long_lo + DECODE_EVICTION_INTERVAL + 2 * setting.page_size),
    )


def _user_lengths(setting: PoolSetting) -> st.SearchStrategy[int]:
    unit = max(setting.page_size, 8)
    return st.one_of(st.integers(1, 2 * unit), st.integers(1, max(2, setting.max_prompt() // 3)))


def _system_lengths(setting: PoolSetting) -> st.SearchStrategy[int]:
    span = setting.window_span
    return st.one_of(st.integers(0, span), st.integers(span, 2 * span + 3 * setting.page_size))


@st.composite
def _mixed_plan(draw: st.DrawFn, setting: PoolSetting) -> Plan:
    """Any shape: 1-4 conversations of 1-4 turns over 1-2 system prompts, with regenerate, fork
    and branch turns, long and short answers, in any of three interleavings."""
    n_systems = draw(st.integers(1, 2))
    system_lens = tuple(draw(_system_lengths(setting)) for _ in range(n_systems))
    n_conv = draw(st.integers(1, 4))
    conv_system = tuple(draw(st.integers(0, n_systems - 1)) for _ in range(n_conv))
    kinds = st.sampled_from(["continue", "continue", "regenerate", "fork", "branch"])
    conv_turns = tuple(
        tuple(
            Turn(
                kind="continue" if t == 0 else draw(kinds),
                user_len=draw(_user_lengths(setting)),
                answer_len=draw(_answer_lengths(setting)),
                cut=draw(st.sampled_from([0.2, 0.4, 0.6])),
            )
            for t in range(draw(st.integers(1, 4)))
        )
        for _ in range(n_conv)
    )
    order = draw(st.sampled_from(["conv-major", "turn-major", "shuffled"]))
    return Plan("mixed", system_lens, conv_system, conv_turns, order)


@st.composite
def _resume_plan(draw: st.DrawFn, setting: PoolSetting) -> Plan:
    """Conversations that pause while others put pressure on the SWA pool, then resume.

    Phase 1: 2-3 conversations on system prompt A (at least one window long) each run two
    turns back to back: a longer first turn, then a short one, so each owns an internal node
    and a short leaf.  Phase 2: 1-3 turns of other conversations (system prompt B) claim SWA
    slots; SWA eviction tombstones the paused conversations' older internal nodes (and
    sometimes prompt A itself) while their newer leaves survive.  Phase 3: the paused
    conversations resume with short turns and maybe a new conversation starts on A.  A
    resumed prompt whose short leaf cannot carry a window-valid match, or a new one that
    ends inside tombstoned prompt A, falls back to an earlier match, recomputes through the
    tombstones and heals them.  Random interleavings reach this only rarely in 0.5.15, whose
    SWA LRU deletes leaves outright and refreshes whole matched paths."""
    span, p = setting.window_span, setting.page_size
    unit = max(p, 8)
    system_lens = (
        draw(st.integers(max(span, setting.window), 2 * span + 3 * p)),
        draw(st.integers(0, span)),
    )
    n_a = draw(st.integers(2, 3))
    short_user = st.integers(1, max(2, setting.window // 2))
    conv_turns: list[tuple[Turn, ...]] = []
    for _ in range(n_a):
        conv_turns.append(
            (
                Turn(
                    "continue",
                    draw(st.integers(unit, max(unit, setting.max_prompt() // 4))),
                    draw(st.integers(1, 12)),
                ),
                Turn("continue", draw(short_user), draw(st.integers(1, 8))),
                Turn("continue", draw(short_user), draw(st.integers(1, 8))),
            )
        )
    n_b = draw(st.integers(1, 3))
    b_turns = [draw(st.integers(1, 2)) if n_b == 1 else 1 for _ in range(n_b)]
    for n in b_turns:
        conv_turns.append(
            tuple(
                Turn(
                    "continue",
                    draw(st.integers(unit, max(unit, setting.max_prompt() // 2))),
                    draw(_answer_lengths(setting)),
                )
                for _ in range(n)
            )
        )
    new_a = draw(st.booleans())
    if new_a:
        conv_turns.append((Turn("continue", draw(short_user), draw(st.integers(1, 8))),))
    conv_system = tuple([0] * n_a + [1] * n_b + ([0] if new_a else []))
    phase1 = tuple((c, t) for c in range(n_a) for t in (0, 1))
    phase2 = tuple((n_a + b, t) for b, n in enumerate(b_turns) for t in range(n))
    phase3 = [(c, 2) for c in range(n_a)]
    if new_a:
        phase3.insert(draw(st.integers(0, n_a)), (n_a + n_b, 0))
    return Plan(
        "resume", system_lens, conv_system, tuple(conv_turns), "phased", (phase1, phase2, tuple(phase3))
    )


@st.composite
def _branch_plan(draw: st.DrawFn, setting: PoolSetting) -> Plan:
    """Long answers, then prompts that diverge inside them.

    A long answer crosses the decode-time SWA eviction trigger, so the request's release
    inserts the middle of its answer as an SWA tombstone (full KV only) with a live tail.  A
    later prompt that keeps part of that answer and then diverges matches up to the end of
    the live prompt node only, recomputes the tombstoned stretch and heals it -- in both
    versions, with no pool pressure needed.  1-3 such conversations, optionally continued,
    interleaved with each other."""
    p = setting.page_size
    span = setting.window_span
    n_conv = draw(st.integers(1, 3))
    system_lens = (draw(st.integers(0, span)),)
    # prompts short enough that a long answer stays feasible (see PoolSetting.max_answer)
    room = max(p, setting.swa_tokens - span - DECODE_EVICTION_INTERVAL - 2 - 4 * p - span)
    conv_turns = []
    for _ in range(n_conv):
        first = Turn(
            "continue",
            draw(st.integers(1, max(1, room // 2))),
            draw(st.integers(setting.long_answer, setting.long_answer + DECODE_EVICTION_INTERVAL)),
        )
        branch = Turn(
            "branch",
            draw(st.integers(1, 2 * max(p, 8))),
            draw(st.one_of(st.integers(1, 16), _answer_lengths(setting))),
            cut=draw(st.sampled_from([0.1, 0.3, 0.5, 0.7])),
        )
        more = draw(st.lists(st.sampled_from(["continue", "regenerate", "branch"]), max_size=1))
        extra = tuple(Turn(k, draw(st.integers(1, 16)), draw(st.integers(1, 16))) for k in more)
        conv_turns.append((first, branch, *extra))
    order = draw(st.sampled_from(["conv-major", "turn-major", "shuffled"]))
    return Plan("branch", system_lens, tuple([0] * n_conv), tuple(conv_turns), order)


def build_workload(
    setting: PoolSetting, plan: Plan, *, seed: int, vocab: int, max_requests: int = 14
) -> Workload:
    """Choose tokens for ``plan`` and lay the requests out in its order, within the limits.

    A plain function (the strategy below draws its arguments) so that tests can build a fixed
    workload without Hypothesis."""
    rng = random.Random(seed)

    def tokens(n: int) -> list[int]:
        return [rng.randrange(vocab) for _ in range(n)]

    systems = [tokens(n) for n in plan.system_lens]
    max_prompt = setting.max_prompt()
    built: dict[tuple[int, int], dict[str, Any]] = {}
    for c, turns in enumerate(plan.conv_turns):
        history = list(systems[plan.conv_system[c]])  # context the next "continue" builds on
        prev_prompt: list[int] | None = None
        prev_answer: list[int] = []
        prev_base: list[int] = list(history)  # what the previous prompt was built on
        for t, turn in enumerate(turns):
            if turn.kind == "regenerate" and prev_prompt is not None:
                prompt = list(prev_prompt)
            elif turn.kind == "fork" and prev_prompt is not None:
                prompt = prev_base + tokens(turn.user_len)
            elif turn.kind == "branch" and prev_prompt is not None:
                # diverge inside the previous answer: after a long answer that part of the
                # tree is an SWA tombstone (decode-time frees), so this match stops before
                # it and the insert heals it
                keep = prev_answer[: max(1, round(turn.cut * len(prev_answer)))]
                prompt = prev_prompt + keep + tokens(turn.user_len)
            else:
                prompt = history + tokens(turn.user_len)
            if len(prompt) > max_prompt:
                break  # the conversation outgrew the SWA pool; end it here
            answer_len = min(turn.answer_len, setting.max_answer(len(prompt)))
            if answer_len < 1:
                break
            answer = tokens(answer_len)
            built[(c, t)] = dict(rid=f"c{c}t{t}", input_ids=prompt, output_ids=answer, session=f"c{c}")
            if turn.kind == "continue" or prev_prompt is None:
                prev_base = history
            prev_prompt, prev_answer = prompt, answer
            history = prompt + answer

    n_conv = len(plan.conv_turns)
    depth = max((len(t) for t in plan.conv_turns), default=0)
    if plan.order == "conv-major":
        keys = [(c, t) for c in range(n_conv) for t in range(depth)]
    elif plan.order == "turn-major":
        keys = [(c, t) for t in range(depth) for c in range(n_conv)]
    elif plan.order == "phased":
        keys = [k for phase in plan.phases for k in phase]
    else:  # shuffled, keeping each conversation's turns in order
        queues = [[(c, t) for t in range(len(ts))] for c, ts in enumerate(plan.conv_turns)]
        keys = []
        while any(queues):
            q = rng.choice([x for x in queues if x])
            keys.append(q.pop(0))
    ordered = [built[k] for k in keys if k in built][:max_requests]
    if not ordered:  # every first turn was too long: serve one small request instead
        ordered = [
            dict(rid="c0t0", input_ids=tokens(1 + setting.page_size), output_ids=tokens(1), session="c0")
        ]
    shape = dict(
        seed=seed,
        vocab=vocab,
        style=plan.style,
        systems=list(plan.system_lens),
        conv_system=list(plan.conv_system),
        turns=[[(t.kind[0], t.user_len, t.answer_len) for t in ts] for ts in plan.conv_turns],
        order=plan.order,
    )
    return Workload(setting=setting, requests=ordered, shape=shape)


@st.composite
def workloads(draw: st.DrawFn, setting: PoolSetting, max_requests: int = 14) -> Workload:
    """A feasible multi-turn workload for ``setting`` (see the module docstring): one of three
    plan styles -- mixed, resume (pause under SWA pressure, then resume) and branch (diverge
    inside a long answer) -- with tokens from a drawn seed and vocabulary size."""
    seed = draw(st.integers(0, 2**32 - 1), label="seed")
    vocab = draw(st.sampled_from([3, 50, 32000]), label="vocab")
    plan = draw(st.one_of(_mixed_plan(setting), _resume_plan(setting), _branch_plan(setting)), label="plan")
    return build_workload(setting, plan, seed=seed, vocab=vocab, max_requests=max_requests)


def workloads_for_page(page_size: int, max_requests: int = 14) -> st.SearchStrategy[Workload]:
    """A workload for one of the fixed settings of ``page_size`` (the setting is drawn too)."""
    return st.sampled_from(SETTINGS[page_size]).flatmap(lambda s: workloads(s, max_requests))


def check_feasible(workload: Workload) -> list[str]:
    """Limit violations of a workload (empty when every request fits by construction)."""
    s = workload.setting
    bad = []
    for r in workload.requests:
        p, o = len(r["input_ids"]), len(r["output_ids"])
        if p > s.max_prompt() or o > s.max_answer(p) or o < 1 or p < 1:
            bad.append(
                f"{r['rid']}: prompt {p} output {o} (max prompt {s.max_prompt()}, "
                f"max answer {s.max_answer(p)})"
            )
    return bad


def settings_table(page_sizes: Sequence[int] = (1, 16, 64)) -> list[dict[str, Any]]:
    """The settings with their derived limits, for docs and reports."""
    rows = []
    for p in page_sizes:
        for s in SETTINGS[p]:
            rows.append(
                dict(
                    s.as_dict(),
                    max_prompt=s.max_prompt(),
                    max_total=s.max_total(),
                    long_answer=s.long_answer,
                    long_answer_max_prompt=max(
                        n for n in range(1, s.max_prompt() + 1) if s.max_answer(n) >= s.long_answer
                    ),
                )
            )
    return rows
