"""The packed page keys (issue 14) are ``pack_pairs``' keys, value for value, and the densified
path still serves ids whose product would overflow."""

from __future__ import annotations

import numpy as np
import pytest

import traces.pages as tp
from traces.schema import BlockContent, gather_ranges


def _reference(content: BlockContent, page_size: int) -> np.ndarray:
    starts = tp.block_starts(content)
    first_page = starts // page_size
    n = (starts + content.block_lens) // page_size - first_page
    first_end = (first_page + 1) * page_size - starts
    k, _ = gather_ranges(np.zeros(len(n), np.int64), n)
    return tp.pack_pairs(np.repeat(content.chain_ids, n), np.repeat(first_end, n) + k * page_size)


def _content(rng: np.random.Generator, n_req: int, max_chain: int) -> BlockContent:
    counts = rng.integers(0, 6, n_req)
    offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    total = int(offsets[-1])
    chains = rng.integers(0, max_chain, total).astype(np.int64)
    lens = rng.integers(1, 300, total).astype(np.int32)
    return BlockContent(offsets, chains, lens)


@pytest.mark.parametrize("seed", range(25))
@pytest.mark.parametrize("page_size", [1, 7, 16, 64, 512])
def test_packed_keys_are_pack_pairs(seed: int, page_size: int) -> None:
    rng = np.random.default_rng(seed)
    content = _content(rng, int(rng.integers(0, 40)), int(rng.integers(1, 10**6)))
    offsets, keys = tp.page_keys(content, page_size)
    want = _reference(content, page_size)
    assert keys.dtype == want.dtype == np.int64 and np.array_equal(keys, want)
    assert offsets[-1] == len(keys)


def test_huge_chain_ids_fall_back_to_densified_keys() -> None:
    rng = np.random.default_rng(1)
    content = _content(rng, 30, 10)
    content = BlockContent(content.offsets, content.chain_ids + 2**61, content.block_lens)
    ones = np.ones(len(content.chain_ids), np.int64)
    assert len(ones) > 0 and tp._packed_page_keys(content.chain_ids, ones, ones, 64) is None
    _, keys = tp.page_keys(content, 16)
    assert np.array_equal(keys, _reference(content, 16))
