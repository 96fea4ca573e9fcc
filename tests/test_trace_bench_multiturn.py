"""The bench_multiturn.py generator: structure, random streams, content sharing, expected hits."""

from __future__ import annotations

import random

import numpy as np
import pytest

from traces import BenchMultiturnArgs, BenchMultiturnLoop, generate_bench_multiturn
from traces.schema import check_trace
from traces.stats import infinite_cache_matched


def test_default_shape():
    t = generate_bench_multiturn(BenchMultiturnArgs(num_clients=8, num_rounds=3))
    check_trace(t)
    req = t.requests
    assert len(req) == 24 and req["arrival_s"].isna().all()
    assert list(req["turn"][:8]) == [0] * 8
    r1 = req[req["turn"] == 1]
    p = r1["parent"].to_numpy()
    # prompt of round r = previous prompt ++ previous output (64) ++ a 512-token question
    assert np.array_equal(r1["prompt_len"].to_numpy(), req["prompt_len"].to_numpy()[p] + 64 + 512)
    assert (req["output_len"] == 64).all()
    spec = t.closed_loop
    assert isinstance(spec, BenchMultiturnLoop)
    assert spec.clients_per_round == (8, 8, 8) and spec.max_parallel == 128 and spec.request_rate == 1.0


def test_round_barrier_adds_heartbeats():
    t = generate_bench_multiturn(BenchMultiturnArgs(num_clients=3, num_rounds=2, enable_round_barrier=True))
    req = t.requests
    hb = req[req["rid"].str.startswith("heartbeat")]
    assert list(hb.index) == [3, 7]  # after each round's rows
    assert (
        (hb["prompt_len"] == 100).all() and (hb["output_len"] == 100).all() and hb["session_id"].isna().all()
    )
    hits = infinite_cache_matched(t, 1)
    assert hits[3] == 0 and hits[7] == 99  # later heartbeats share the 100 tokens of id 1


def test_lengths_follow_the_scripts_numpy_stream():
    args = BenchMultiturnArgs(
        num_clients=5,
        num_rounds=3,
        request_length=200,
        output_length=50,
        sub_question_input_length=30,
        range_ratio=0.5,
        disable_random_sample=True,
        seed=3,
    )
    t = generate_bench_multiturn(args)
    rs = np.random.RandomState(3)  # the script: np.random.seed(seed), then sample_random_requests twice
    q0 = rs.randint(100, 201, size=5)
    o0 = rs.randint(25, 51, size=5)
    rs.randint(0, args.vocab_size, size=5)  # token offsets
    sq = rs.randint(15, 31, size=10)
    so = rs.randint(25, 51, size=10)
    req = t.requests
    assert list(req["prompt_len"][:5]) == list(q0) and list(req["output_len"][:5]) == list(o0)
    # round 1, client 0 pops the last sub-question of the pool, client 1 the one before, ...
    r1 = req[req["turn"] == 1]
    prev = r1["parent"].to_numpy()
    added = (
        r1["prompt_len"].to_numpy() - req["prompt_len"].to_numpy()[prev] - req["output_len"].to_numpy()[prev]
    )
    assert list(added) == list(sq[::-1][:5]) and list(r1["output_len"]) == list(so[::-1][:5])


def test_min_max_rounds_use_the_python_stream():
    args = BenchMultiturnArgs(num_clients=50, min_rounds=1, max_rounds=4, seed=11)
    t = generate_bench_multiturn(args)
    py = random.Random(11)
    rounds = [py.randint(1, 4) for _ in range(50)]
    per_client = t.requests.groupby("session_id").size()
    assert [per_client[f"client-{c}"] for c in range(50)] == rounds
    spec = t.closed_loop
    assert spec.clients_per_round == tuple(sum(r > k for r in rounds) for k in range(4))
    # the sender continues the same Python stream
    assert spec.sender_rng().random() == py.random()


def test_synthetic_prompts_with_equal_start_share_exactly():
    args = BenchMultiturnArgs(
        num_clients=40,
        num_rounds=1,
        request_length=12,
        output_length=2,
        range_ratio=0.5,
        disable_random_sample=True,
        vocab_size=16,
        seed=5,
    )
    t = generate_bench_multiturn(args)
    rs = np.random.RandomState(5)
    lens = rs.randint(6, 13, size=40)
    rs.randint(1, 3, size=40)
    offsets = rs.randint(0, 16, size=40)
    tokens = [[(offsets[i] + i + j) % 16 for j in range(lens[i])] for i in range(40)]
    assert list(t.requests["prompt_len"]) == list(lens)
    seq_off, pages = t.sequence_pages(1)
    seen: dict[tuple, int] = {}
    for i, toks in enumerate(tokens):
        for k in range(len(toks)):
            pid = int(pages[seq_off[i] + k])
            assert seen.setdefault(tuple(toks[: k + 1]), pid) == pid
    assert len(set(seen.values())) == len(seen)
    assert infinite_cache_matched(t, 1).sum() > 0  # with a 16-token vocabulary, starts collide


def test_expected_hit_of_later_rounds():
    # bench_multiturn's cache_hit_kit expects cached >= floor_page(prev_prompt + output - 1)
    t = generate_bench_multiturn(
        BenchMultiturnArgs(num_clients=4, num_rounds=4, request_length=100, output_length=30)
    )
    req = t.requests
    for page in (1, 16, 64):
        hits = infinite_cache_matched(t, page)
        child = req.index[req["parent"] >= 0]
        p = req["parent"][child].to_numpy()
        want = (req["prompt_len"].to_numpy()[p] + req["output_len"].to_numpy()[p] - 1) // page * page
        assert np.array_equal(hits[child], want)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"min_rounds": 5, "max_rounds": 2}, "must be <="),
        ({"distribution": "gamma"}, "poisson or uniform"),
        ({"ready_queue_policy": "lifo"}, "random or fifo"),
        ({"flush_between_rounds": True}, "requires --enable-round-barrier"),
        ({"range_ratio": 0.0}, "range-ratio"),
    ],
)
def test_invalid_flags(kw, match):
    with pytest.raises(ValueError, match=match):
        generate_bench_multiturn(BenchMultiturnArgs(**kw))
