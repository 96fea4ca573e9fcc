"""Run an allocator op sequence on SGLang 0.5.23's own ``SWATokenToKVPoolAllocator`` (CPU).

Runs in the oracle venv (``tests/oracle_harness.py:oracle_python("0.5.23")``), never in
kvplan's. Reads one JSON object on stdin::

    {"page_size": P, "full_tokens": F, "swa_tokens": S, "need_sort": bool, "ops": [...]}

and prints one JSON list: after every op, the free lists of both pools (page ids, list order)
and each live row's full and SWA page ids. Ops work on request rows of full token indices:
``extend`` (rows, new tokens), ``decode`` (rows), ``free`` (row, token range, SGLang method),
``group_begin`` / ``group_end``.
"""

from __future__ import annotations

import json
import os
import sys
import warnings

warnings.filterwarnings("ignore")
sys.path.insert(
    0,
    os.environ.get(
        "KVPLAN_ORACLE_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "shared", "oracle")
    ),
)
import sgl_stubs  # noqa: E402,F401  (must precede every sglang import)
import torch  # noqa: E402
from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator  # noqa: E402
from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool  # noqa: E402
from sglang.srt.runtime_context import publish  # noqa: E402
from sglang.srt.server_args import ServerArgs  # noqa: E402


def build(cfg: dict) -> SWATokenToKVPoolAllocator:
    ps = cfg["page_size"]
    publish(
        ServerArgs(model_path="dummy", page_size=ps, device="cpu", attention_backend="torch_native"),
        role="scheduler",
    )
    kv = SWAKVPool(
        size=cfg["full_tokens"],
        size_swa=cfg["swa_tokens"],
        page_size=ps,
        dtype=torch.bfloat16,
        head_num=1,
        head_dim=4,
        swa_attention_layer_ids=[0],
        full_attention_layer_ids=[1],
        device="cpu",
    )
    return SWATokenToKVPoolAllocator(
        size=cfg["full_tokens"],
        size_swa=cfg["swa_tokens"],
        page_size=ps,
        dtype=torch.bfloat16,
        device="cpu",
        kvcache=kv,
        need_sort=cfg["need_sort"],
    )


def pages(t: torch.Tensor, ps: int) -> list[int]:
    return [int(x) for x in (t // ps).tolist()]


def main() -> None:
    cfg = json.load(sys.stdin)
    ps = cfg["page_size"]
    a = build(cfg)
    rows: dict[str, list[int]] = {}
    out = []
    for op in cfg["ops"]:
        kind = op["op"]
        if kind == "extend":
            rids = [r for r, _ in op["reqs"]]
            pre = [len(rows.setdefault(r, [])) for r in rids]
            seq = [p + n for p, (_, n) in zip(pre, op["reqs"], strict=True)]
            total = sum(n for _, n in op["reqs"])
            if ps == 1:
                got = a.alloc(total)
            else:
                last = torch.tensor([rows[r][-1] if rows[r] else -1 for r in rids], dtype=torch.int64)
                got = a.alloc_extend(
                    torch.tensor(pre), torch.tensor(pre), torch.tensor(seq), torch.tensor(seq), last, total
                )
            assert got is not None, ("extend failed", op)
            got = got.tolist()
            for r, (_, n) in zip(rids, op["reqs"], strict=True):
                rows[r].extend(got[:n])
                got = got[n:]
        elif kind == "decode":
            rids = op["rows"]
            if ps == 1:
                got = a.alloc(len(rids))
            else:
                seq = torch.tensor([len(rows[r]) + 1 for r in rids])
                last = torch.tensor([rows[r][-1] for r in rids], dtype=torch.int64)
                got = a.alloc_decode(seq, seq, last)
            assert got is not None, ("decode failed", op)
            for r, x in zip(rids, got.tolist(), strict=True):
                rows[r].append(x)
        elif kind == "free":
            idx = torch.tensor(rows[op["row"]][op["start"] : op["end"]], dtype=torch.int64)
            how = op["how"]
            if how.endswith("segment"):
                getattr(a, how)(idx, start_pos=op["start"])
            else:
                getattr(a, how)(idx)
            if op.get("drop"):
                del rows[op["row"]]
        elif kind == "group_begin":
            a.free_group_begin()
        elif kind == "group_end":
            a.free_group_end()
        else:
            raise ValueError(f"unknown op {kind!r}")
        m = a.full_to_swa_index_mapping
        out.append(
            dict(
                full_free=a.full_attn_allocator.get_all_free_pages().tolist(),
                swa_free=a.swa_attn_allocator.get_all_free_pages().tolist(),
                rows={
                    r: [pages(torch.tensor(v[::ps]), ps), pages(m[torch.tensor(v[::ps])], ps)]
                    for r, v in rows.items()
                    if v
                },
            )
        )
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
