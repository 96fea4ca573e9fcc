"""Page ids: equal exactly when the whole prefix up to the page end is equal (brute-force checked)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from traces.chains import chain_block_ids
from traces.readers.common import fixed_block_lens
from traces.schema import BlockContent, TokenContent, Trace, make_requests
from traces.stats import infinite_cache_matched


def _token_model(content: BlockContent) -> list[list[tuple[int, int]]]:
    """Each token as (chain id of its block, offset in block): the identity the chain ids promise."""
    out = []
    for r in range(len(content.offsets) - 1):
        toks = []
        for j in range(content.offsets[r], content.offsets[r + 1]):
            toks += [(int(content.chain_ids[j]), k) for k in range(int(content.block_lens[j]))]
        out.append(toks)
    return out


def _check_pages(seqs: list[list], offsets: np.ndarray, ids: np.ndarray, page: int) -> None:
    by_prefix: dict[tuple, int] = {}
    for r, seq in enumerate(seqs):
        n_pages = len(seq) // page
        assert offsets[r + 1] - offsets[r] == n_pages
        for k in range(n_pages):
            key = tuple(seq[: (k + 1) * page])
            pid = int(ids[offsets[r] + k])
            assert by_prefix.setdefault(key, pid) == pid, "same prefix, different page id"
    assert len(set(by_prefix.values())) == len(by_prefix), "different prefixes, same page id"


requests_strategy = st.lists(
    st.tuples(st.lists(st.integers(0, 2), min_size=1, max_size=6), st.integers(1, 4), st.integers(0, 5)),
    min_size=1,
    max_size=8,
)


def _hash_content(
    reqs: list[tuple[list[int], int, int]], block: int
) -> tuple[BlockContent, np.ndarray, np.ndarray]:
    """Mooncake-like content from raw (not chained) block ids; outputs appended as unique blocks."""
    from traces.continuation import build_sequences

    counts = np.array([len(ids) for ids, _, _ in reqs])
    prompt = np.array([(len(ids) - 1) * block + min(last, block) for ids, last, _ in reqs])
    output = np.array([o for _, _, o in reqs])
    offsets = np.concatenate(([0], np.cumsum(counts)))
    chains, n = chain_block_ids(np.array([x for ids, _, _ in reqs for x in ids], dtype=np.int64), offsets)
    lens = fixed_block_lens(counts, prompt, block).astype(np.int64)
    content = build_sequences(
        offsets, chains, lens, n, prompt, output, np.full(len(reqs), -1), np.zeros(len(reqs), bool)
    )
    return content, prompt, output


@settings(max_examples=60, deadline=None)
@given(reqs=requests_strategy, block=st.integers(1, 4), page=st.integers(1, 5))
def test_block_pages_match_prefix_identity(reqs, block, page):
    content, prompt, output = _hash_content(reqs, block)
    trace = Trace(make_requests(np.arange(len(reqs)), np.zeros(len(reqs)), prompt, output), content)
    offsets, ids = trace.sequence_pages(page)
    _check_pages(_token_model(content), offsets, ids, page)
    _check_keys_name_the_same_pages(trace, page, offsets, ids)
    # prompt pages are the leading part of each sequence's pages
    p_off, p_ids = trace.prompt_pages(page)
    for r in range(len(reqs)):
        n = prompt[r] // page
        assert list(p_ids[p_off[r] : p_off[r + 1]]) == list(ids[offsets[r] : offsets[r] + n])


@settings(max_examples=60, deadline=None)
@given(reqs=requests_strategy, block=st.integers(1, 4), page=st.integers(1, 5))
def test_infinite_cache_matches_brute_force(reqs, block, page):
    content, prompt, output = _hash_content(reqs, block)
    trace = Trace(make_requests(np.arange(len(reqs)), np.zeros(len(reqs)), prompt, output), content)
    got = infinite_cache_matched(trace, page)
    seqs = _token_model(content)
    inserted: set[tuple] = set()
    for r, seq in enumerate(seqs):
        k = 0
        while (k + 1) * page <= len(seq) and tuple(seq[: (k + 1) * page]) in inserted:
            k += 1
        assert got[r] == min(k * page, (prompt[r] - 1) // page * page)
        keep = prompt[r] + output[r] - (1 if output[r] > 0 else 0)  # SGLang inserts prompt + output - 1
        inserted |= {tuple(seq[: (j + 1) * page]) for j in range(keep // page)}


@settings(max_examples=40, deadline=None)
@given(
    seqs=st.lists(st.lists(st.integers(0, 2), min_size=1, max_size=12), min_size=1, max_size=6),
    page=st.integers(1, 4),
)
def test_token_pages_match_prefix_identity(seqs, page):
    offsets = np.concatenate(([0], np.cumsum([len(s) for s in seqs])))
    content = TokenContent(offsets, np.array([t for s in seqs for t in s], dtype=np.int64))
    trace = Trace(
        make_requests(np.arange(len(seqs)), np.zeros(len(seqs)), [len(s) for s in seqs], [0] * len(seqs)),
        content,
    )
    p_off, ids = trace.sequence_pages(page)
    _check_pages([list(s) for s in seqs], p_off, ids, page)
    _check_keys_name_the_same_pages(trace, page, p_off, ids)


def _check_keys_name_the_same_pages(trace, page, offsets, ids):
    """page_keys (what the simulator uses) are equal exactly where the dense ids are."""
    k_off, keys = trace.page_keys(page)
    assert list(k_off) == list(offsets) and len(keys) == len(ids)
    pairs = set(zip(keys.tolist(), ids.tolist(), strict=True))
    assert len({k for k, _ in pairs}) == len(pairs) == len({i for _, i in pairs})


def test_chained_ids_are_kept_and_unchained_are_rechained():
    offsets = np.array([0, 3, 6])
    chained = np.array([0, 1, 2, 0, 1, 3])  # already prefix-chained
    ids, n = chain_block_ids(chained, offsets)
    assert list(ids) == list(chained) and n == 4
    flat = np.array([5, 6, 7, 9, 6, 7])  # 6 follows 5 and 9: not chained
    ids, _ = chain_block_ids(flat, offsets)
    assert ids[1] != ids[4] and ids[2] != ids[5]


def test_page_ids_numbered_by_first_appearance():
    content = BlockContent(np.array([0, 1, 2]), np.array([0, 0]), np.array([8, 4]))
    trace = Trace(make_requests(np.arange(2), np.zeros(2), [8, 4], [0, 0]), content)
    offsets, ids = trace.sequence_pages(2)
    assert list(offsets) == [0, 4, 6] and list(ids) == [0, 1, 2, 3, 0, 1]
