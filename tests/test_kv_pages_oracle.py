"""Differential test: kvplan's page-id allocator against SGLang 0.5.23's own
``SWATokenToKVPoolAllocator`` (run on CPU in the oracle venv by ``oracle_alloc_driver.py``).

Random extend / decode / free / free-group sequences; after every op both sides must hold the
same free lists (page ids, in list order) and give every row the same FULL and SWA pages.
"""

from __future__ import annotations

import json
import os
import random
import subprocess

import numpy as np
import pytest
from oracle_harness import oracle_dir, oracle_missing_reason, oracle_python

from simulator.kv_pages import SWAPageState

DRIVER = os.path.join(os.path.dirname(__file__), "oracle_alloc_driver.py")


def _skip_unless_oracle() -> None:
    reason = oracle_missing_reason("0.5.23")
    if reason is not None:
        if os.environ.get("KVPLAN_REQUIRE_ORACLE") == "1":
            pytest.fail(f"KVPLAN_REQUIRE_ORACLE=1 but {reason}")
        pytest.skip(reason)


class Rows:
    """kvplan's side of the sequence: rows as (length, full pages) over :class:`SWAPageState`."""

    def __init__(self, state: SWAPageState) -> None:
        self.s = state
        self.p = state.page_size
        self.len: dict[str, int] = {}
        self.pages: dict[str, np.ndarray] = {}
        self.swa_lo: dict[str, int] = {}

    def extend(self, reqs: list[tuple[str, int]]) -> None:
        p = self.p
        new_counts = []
        for r, n in reqs:
            a = self.len.get(r, 0)
            new_counts.append(-(-(a + n) // p) - (-(-a // p)))
        full, _ = self.s.alloc_extend(sum(new_counts), sum(n for _, n in reqs), len(reqs))
        for (r, n), k in zip(reqs, new_counts, strict=True):
            self.pages[r] = np.concatenate([self.pages.get(r, np.empty(0, np.int64)), full[:k]])
            full = full[k:]
            self.len[r] = self.len.get(r, 0) + n
            self.swa_lo.setdefault(r, 0)

    def decode(self, rids: list[str]) -> None:
        opens = [r for r in rids if self.len[r] % self.p == 0]
        full, _ = self.s.alloc_decode(len(opens), len(rids))
        for r, f in zip(opens, full, strict=True):
            self.pages[r] = np.append(self.pages[r], f)
        for r in rids:
            self.len[r] += 1

    def free(self, op: dict) -> None:
        p = self.p
        pg = self.pages[op["row"]][op["start"] // p : -(-op["end"] // p)]
        how = op["how"]
        ordered = how.endswith("segment")
        kind = how.removesuffix("_segment")
        if kind in ("free", "free_segment"):
            self.s.free(pg, ordered)
        elif kind == "free_swa":
            self.s.free_swa(pg, ordered)
        else:
            self.s.free_full(pg, ordered)
        if op.get("drop"):
            for d in (self.len, self.pages, self.swa_lo):
                del d[op["row"]]

    def state(self) -> dict:
        return dict(
            full_free=self.s.full.all_free().tolist(),
            swa_free=self.s.swa.all_free().tolist(),
            rows={r: [v.tolist(), self.s.full_to_swa[v].tolist()] for r, v in self.pages.items() if len(v)},
        )


def random_ops(rng: random.Random, rows: Rows, n_ops: int) -> tuple[list[dict], list[dict]]:
    """Generate ops that are valid for the current state; apply them; return ops and states."""
    p = rows.p
    ops, states = [], []
    next_id = 0
    in_group = False
    for _ in range(n_ops):
        full_free, swa_free = rows.s.free_counts()
        free = min(full_free, swa_free)
        live = sorted(rows.len)
        choice = rng.random()
        op: dict
        if choice < 0.3 and free > 4:
            reqs = []
            for _ in range(rng.randint(1, 3)):
                if live and rng.random() < 0.3:
                    r = rng.choice(live)
                else:
                    r = f"r{next_id}"
                    next_id += 1
                if any(r == x for x, _ in reqs):
                    continue
                reqs.append((r, rng.randint(1, 3 * p)))
            # the allocator's own bound: at most free pages in both pools
            need = sum(-(-(rows.len.get(r, 0) + n) // p) - (-(-rows.len.get(r, 0) // p)) for r, n in reqs)
            if need > free:
                continue
            op = dict(op="extend", reqs=[list(x) for x in reqs])
            rows.extend(reqs)
        elif choice < 0.55 and live and free >= len(live):
            batch = rng.sample(live, rng.randint(1, len(live)))
            op = dict(op="decode", rows=batch)
            rows.decode(batch)
        elif choice < 0.7 and live:
            r = rng.choice(live)
            lo = rows.swa_lo[r]
            hi = rows.len[r] // p * p
            if hi <= lo:
                continue
            new = rng.randrange(lo + p, hi + 1, p)
            op = dict(op="free", row=r, start=lo, end=new, how=rng.choice(["free_swa_segment", "free_swa"]))
            rows.free(op)
            rows.swa_lo[r] = new
        elif choice < 0.9 and live:
            r = rng.choice(live)
            lo, n = rows.swa_lo[r], rows.len[r]
            seq = []
            if lo > 0:
                how = rng.choice(["free_full_segment", "free_full"])
                seq.append(dict(op="free", row=r, start=0, end=lo, how=how))
            seq.append(
                dict(op="free", row=r, start=lo, end=n, how=rng.choice(["free_segment", "free"]), drop=True)
            )
            for op in seq:
                rows.free(op)
                ops.append(op)
                states.append(rows.state())
            continue
        elif choice < 1.0:
            op = dict(op="group_end" if in_group else "group_begin")
            (rows.s.group_end if in_group else rows.s.group_begin)()
            in_group = not in_group
        else:  # pragma: no cover
            continue
        ops.append(op)
        states.append(rows.state())
    if in_group:
        rows.s.group_end()
        ops.append(dict(op="group_end"))
        states.append(rows.state())
    return ops, states


@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.parametrize("need_sort", [False, True])
def test_page_ids_match_sglang_allocator(page_size: int, need_sort: bool) -> None:
    _skip_unless_oracle()
    full_pages, swa_pages = 48, 24
    rows = Rows(SWAPageState(full_pages, swa_pages, page_size, need_sort))
    ops, ours = random_ops(random.Random(page_size), rows, 600)
    kinds = {o["op"] if o["op"] != "free" else o["how"] for o in ops}
    assert {"extend", "decode", "group_begin", "free_segment", "free_swa_segment"} <= kinds, kinds
    if need_sort:  # the sequence must reach merge_and_sort_free
        assert rows.s.full.merges and rows.s.swa.merges
    payload = dict(
        page_size=page_size,
        full_tokens=full_pages * page_size,
        swa_tokens=swa_pages * page_size,
        need_sort=need_sort,
        ops=ops,
    )
    env = dict(os.environ, KVPLAN_ORACLE_DIR=str(oracle_dir()))
    proc = subprocess.run(
        [str(oracle_python("0.5.23")), DRIVER],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    theirs = json.loads(proc.stdout)
    assert len(theirs) == len(ours)
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        assert a == b, f"op {i} {ops[i]}: kvplan {a} != sglang {b}"


TREE_DRIVER = os.path.join(os.path.dirname(__file__), "oracle_tree_pages_driver.py")


@pytest.mark.parametrize("page_size", [1, 4])
def test_recorded_run_frees_the_pages_sglang_frees(page_size: int, tmp_path, monkeypatch) -> None:
    """A batch-1 cache replay with page ids against SGLang's ``UnifiedRadixCache`` on its own
    allocator: the same free page ids (in list order) at every checkpoint of every request."""
    _skip_unless_oracle()
    from test_memory_ops import _sessions

    import simulator.cache_replay as cr

    caches = []
    make_cache = cr.make_cache

    def make(*args):
        cache = make_cache(*args)
        plain = cache.sizes

        def sizes() -> dict:
            out = plain()
            pages = cache.allocator.recorder.pages
            out["full_free_ids"] = pages.full.all_free().tolist()
            out["swa_free_ids"] = pages.swa.all_free().tolist()
            return out

        cache.sizes = sizes
        caches.append(cache)
        return cache

    monkeypatch.setattr(cr, "make_cache", make)
    full, swa, window = 2000, 800, 32
    cfg = cr.CacheReplayConfig(
        page_size=page_size, full_tokens=full, swa_tokens=swa, window=window, record_ops=True
    )
    reqs = _sessions(1)
    ours = cr.replay_requests(reqs, cfg)
    assert ours.counters["full_evicted"] > 0 and ours.counters["tombstones_healed"] > 0
    path = tmp_path / "w.jsonl"
    path.write_text("".join(json.dumps(dict(rid=r, input_ids=i, output_ids=o)) + "\n" for r, i, o in reqs))
    flags = f"--page-size {page_size} --full-size {full} --swa-size {swa} --window {window}"
    cmd = [
        str(oracle_python("0.5.23")),
        TREE_DRIVER,
        *flags.split(),
        "--per-request",
        "--tree-core",
        "python",
    ]
    env = dict(os.environ, KVPLAN_ORACLE_DIR=str(oracle_dir()))
    proc = subprocess.run(
        [*cmd, "--workload", str(path)], capture_output=True, text=True, env=env, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    theirs = json.loads(proc.stdout)["requests"]
    assert [r["rid"] for r in theirs] == [r["rid"] for r in ours.records]
    checked = 0
    for a, b in zip(ours.records, theirs, strict=True):
        for point in (
            "after_match",
            "after_prefill_alloc",
            "after_prefill_checkpoint",
            "before_release",
            "after_release",
        ):
            if point in a and point in b:
                for key in ("full_free_ids", "swa_free_ids"):
                    assert a[point][key] == b[point][key], (a["rid"], point, key)
                checked += 1
    assert checked > 3 * len(reqs)
