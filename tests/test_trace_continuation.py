"""Continuation inference in hash-id traces and the reuse-output rewrite."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from traces import load_trace
from traces.readers.mooncake import read_mooncake
from traces.stats import infinite_cache_matched


def _write(tmp_path: Path, rows: list[dict]) -> Path:
    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def _req(t: int, n_in: int, n_out: int, ids: list[int]) -> dict:
    return {"timestamp": t, "input_length": n_in, "output_length": n_out, "hash_ids": ids}


def test_inferred_continuation_and_rewrite(tmp_path):
    # block size 4; block 100 is a shared system prompt
    rows = [
        _req(0, 10, 1, [100, 1, 9]),  # complete [100, 1]: 1 is new here -> owns that prefix
        _req(1, 5, 1, [100, 8]),  # complete [100] was seen before: only the shared prompt, owns nothing
        _req(2, 10, 3, [100, 2, 3]),  # complete [100, 2], new -> owner
        _req(3, 17, 2, [100, 2, 4, 5, 6]),  # starts with [100, 2] and is longer -> continues row 2
        _req(4, 9, 1, [100, 2, 7]),  # starts with [100, 2] but is shorter than row 2 -> no link
    ]
    t = read_mooncake(_write(tmp_path, rows), block_size=4)
    req = t.requests
    assert list(req["parent"]) == [-1, -1, -1, 2, -1]
    assert list(req["turn"]) == [0, 0, 0, 1, 0]
    assert req["session_id"][3] == req["session_id"][2] == req["rid"][2] == "3"  # rid = line number
    c = t.content
    # row 3 = row 2's prompt blocks (4 + 4 + 2 tokens) ++ row 2's output (3) ++ fresh rest (17 - 13)
    # ++ its own output block (2)
    r2 = slice(c.offsets[2], c.offsets[3])
    r3 = slice(c.offsets[3], c.offsets[4])
    assert list(c.block_lens[r3]) == [4, 4, 2, 3, 4, 2]
    assert list(c.chain_ids[r3][:4]) == list(c.chain_ids[r2])  # parent prompt and parent output
    # infinite cache at page size 1: row 3 hits its parent's prompt + output - 1 tokens
    assert infinite_cache_matched(t, 1)[3] == 10 + 3 - 1


def test_blocks_only_keeps_the_trace_blocks(tmp_path):
    rows = [_req(0, 10, 3, [1, 2, 3]), _req(1, 17, 2, [1, 2, 4, 5, 6])]
    t = read_mooncake(_write(tmp_path, rows), block_size=4, continuation="blocks-only")
    assert list(t.requests["parent"]) == [-1, 0]
    r1 = slice(t.content.offsets[1], t.content.offsets[2])
    assert list(t.content.block_lens[r1]) == [4, 4, 4, 4, 1, 2]
    assert infinite_cache_matched(t, 1)[1] == 8


def test_short_continuation_truncates_parent_output(tmp_path):
    # child prompt 12 < parent prompt 10 + output 5: output block cut to 2 tokens, no fresh block
    rows = [_req(0, 10, 5, [1, 2, 3]), _req(1, 12, 1, [1, 2, 4])]
    t = read_mooncake(_write(tmp_path, rows), block_size=4)
    r1 = slice(t.content.offsets[1], t.content.offsets[2])
    assert list(t.content.block_lens[r1]) == [4, 4, 2, 2, 1]
    assert infinite_cache_matched(t, 1)[1] == 11  # capped at prompt_len - 1


def test_longest_match_wins_for_deep_chains(tmp_path):
    rows = [_req(0, 6, 1, [1, 2]), _req(1, 10, 1, [1, 3, 4]), _req(2, 14, 1, [1, 3, 5, 6])]
    t = read_mooncake(_write(tmp_path, rows), block_size=4)
    assert list(t.requests["parent"]) == [-1, 0, 1]  # row 0 brought block 1 first, so it owns [1]


@pytest.mark.parametrize(
    ("name", "continuations", "roots"),
    [("synthetic_trace.jsonl", 770, 3223), ("arxiv_trace_head1000.jsonl", 65, 935)],
)
def test_mooncake_real_continuations(shared_traces, name, continuations, roots):
    t = load_trace(shared_traces / "mooncake" / name)
    assert int((t.requests["parent"] >= 0).sum()) == continuations
    assert t.requests["session_id"].nunique() == roots


def test_dynamo_reuse_output_tracks_observed_cached_tokens(shared_traces):
    path = shared_traces / "dynamo" / "pi_request_trace.jsonl.gz"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reuse = load_trace(path)
        blocks = load_trace(path, continuation="blocks-only")
    observed = reuse.requests["observed_cached_tokens"].to_numpy()
    child = (reuse.requests["parent"] >= 0).to_numpy()
    err_reuse = np.abs(infinite_cache_matched(reuse, 16) - observed)[child].mean()
    err_blocks = np.abs(infinite_cache_matched(blocks, 16) - observed)[child].mean()
    assert err_reuse < err_blocks
    assert err_reuse < 200  # tokens, mean over the 12 follow-up turns (blocks-only: about 470)
