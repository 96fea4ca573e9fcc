"""Every reader on the real public files and on the committed samples."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from traces import TraceWarning, detect_format, load_trace, trace_stats
from traces.readers.ragpulse import COMPONENT_ORDER
from traces.schema import check_trace

SAMPLES = Path(__file__).resolve().parents[1] / "traces" / "data"


def _load_quiet(path, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceWarning)
        return load_trace(path, **kw)


@pytest.mark.parametrize(
    ("rel", "fmt", "n"),
    [
        ("mooncake_arxiv_head800.jsonl", "mooncake", 800),
        ("ragpulse", "ragpulse", 300),
        ("azure_conv_head1000.csv", "azure", 1000),
        ("dynamo_pi_request_trace.jsonl.gz", "dynamo-events", 17),
        ("tokens_multiturn.jsonl", "tokens", 18),
    ],
)
def test_samples_load(rel, fmt, n):
    path = SAMPLES / rel
    assert detect_format(path) == fmt
    t = _load_quiet(path)
    check_trace(t)
    assert len(t) == n
    assert (SAMPLES / rel).stat().st_size < 200_000 or (SAMPLES / rel).is_dir()


def test_mooncake_synthetic(shared_traces):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # sorted file: no warning
        t = load_trace(shared_traces / "mooncake" / "synthetic_trace.jsonl")
    check_trace(t)
    req = t.requests
    assert len(req) == 3993
    assert req["prompt_len"].mean() == pytest.approx(15325, abs=1)
    assert req["output_len"].mean() == pytest.approx(149, abs=1)
    assert req["arrival_s"].iloc[-1] == pytest.approx(1022.025)
    # all prompt blocks but the last are 512 tokens (the output block follows)
    c = t.content
    assert int(c.block_lens[c.offsets[0]]) == 512


def test_mooncake_block_size_parameter(shared_traces):
    from traces.errors import TraceFormatError

    with pytest.raises(TraceFormatError, match="ceil"):
        load_trace(shared_traces / "mooncake" / "synthetic_trace.jsonl", block_size=256)


def test_ragpulse(shared_traces):
    with pytest.warns(TraceWarning, match="not sorted"):
        t = load_trace(shared_traces / "ragpulse")
    check_trace(t)
    req = t.requests
    assert len(req) == 7106
    assert np.all(np.diff(req["arrival_s"].to_numpy()) >= 0)
    assert req["session_id"].nunique() == 3990
    assert int(req["turn"].max()) == 24  # 25 requests in the longest session
    assert [c for c, _, _ in COMPONENT_ORDER] == [
        "sys_prompt",
        "passages_ids",
        "history",
        "web_search",
        "user_input",
    ]
    # the template remainder (6..12 tokens) is the last prompt block, unique per request
    c = t.content
    last_prompt = c.offsets[1:] - 2  # the block before the output block
    rem = c.block_lens[last_prompt]
    assert rem.min() >= 6 and rem.max() <= 12
    assert len(np.unique(c.chain_ids[last_prompt])) == len(req)
    s = trace_stats(t, 1)
    assert s["infinite_cache_hit_rate"] == pytest.approx(0.315, abs=0.01)  # PROVENANCE: 31.5 %


@pytest.mark.parametrize(
    ("name", "n"), [("AzureLLMInferenceTrace_code.csv", 8819), ("AzureLLMInferenceTrace_conv.csv", 19366)]
)
def test_azure(shared_traces, name, n):
    t = load_trace(shared_traces / "azure" / name)
    check_trace(t)
    assert len(t) == n
    assert t.requests["arrival_s"].iloc[0] == 0.0
    assert trace_stats(t, 16)["infinite_cache_hit_rate"] == 0.0  # unique content


def test_dynamo_events(shared_traces):
    with pytest.warns(TraceWarning, match="not sorted"):  # events are in completion order
        t = load_trace(shared_traces / "dynamo" / "pi_request_trace.jsonl.gz")
    check_trace(t)
    req = t.requests
    assert len(req) == 17
    assert req["session_id"].nunique() == 5
    assert int((req["parent"] >= 0).sum()) == 12
    assert req["prompt_len"].mean() == pytest.approx(3913, abs=1)
    # blocks-only reproduces PROVENANCE's 16-token prefix-hit bound (0.717)
    bo = _load_quiet(shared_traces / "dynamo" / "pi_request_trace.jsonl.gz", continuation="blocks-only")
    assert trace_stats(bo, 16)["infinite_cache_hit_rate"] == pytest.approx(0.717, abs=0.005)


def test_token_jsonl_sample():
    t = load_trace(SAMPLES / "tokens_multiturn.jsonl")
    req = t.requests
    assert req["arrival_s"].isna().all() and t.closed_loop is not None
    assert t.content.kind == "tokens"
    child = req.index[req["parent"] >= 0]
    p = req["parent"][child].to_numpy()
    # a follow-up turn repeats the previous prompt + output, so it hits all of it but the last token
    from traces.stats import infinite_cache_matched

    hits = infinite_cache_matched(t, 1)
    assert np.array_equal(hits[child], req["prompt_len"].to_numpy()[p] + req["output_len"].to_numpy()[p] - 1)
