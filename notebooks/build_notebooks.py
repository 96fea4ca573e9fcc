"""Write notebooks/*.ipynb from the cells below (outputs empty; CI executes them with nbclient,
tests/test_notebooks.py). Edit here, then run ``.venv/bin/python notebooks/build_notebooks.py``."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent

SETUP = """\
import os
import tempfile
from pathlib import Path

from IPython.display import Image, display

ROOT = Path.cwd().resolve()
while not (ROOT / "pyproject.toml").exists():  # run from notebooks/ or the repository root
    ROOT = ROOT.parent
os.chdir(ROOT)  # traces are named by their repository path
"""

CAPACITY = [
    new_markdown_cell(
        "# Capacity analysis: which flags for this traffic?\n\n"
        "Load a trace, sweep `--mem-fraction-static` × `--swa-full-tokens-ratio`, plot the hit rate "
        "and p90 TTFT over the grid and the hit rate against capacity (with the optimal bound and "
        "LRU's curve), choose the cheapest configuration that meets the SLOs, and print SGLang's "
        "launch flags. The logic is in `simulator.reports` (docs/reports.md); this notebook only "
        "calls it and plots. `kvplan report` writes the same figures as a report."
    ),
    new_code_cell(
        SETUP
        + """
from simulator import SimConfig
from simulator.reports import plots
from simulator.reports.analysis import analyse, load, points_table, sweep

TRACE = "traces/data/mooncake_arxiv_head800.jsonl"
LIMIT = int(os.environ.get("KVPLAN_NB_LIMIT", "80"))  # requests: small, so the notebook runs in seconds
SLO = "ttft.p90<=1.5"
"""
    ),
    new_markdown_cell("## 1. The trace"),
    new_code_cell(
        """from traces import trace_stats

trace = load(TRACE, limit=LIMIT)
stats = trace_stats(trace, 64)
{k: stats[k] for k in ("requests", "time_span_s", "total_input_tokens", "infinite_cache_hit_rate")}"""
    ),
    new_markdown_cell(
        "## 2. The sweep\n\ngpt-oss-120b on 8×H200, page size 64. The memory fractions are small so "
        "that the KV pools are about the size of this short trace's working set."
    ),
    new_code_cell(
        """store = Path(tempfile.mkdtemp(prefix="kvplan-nb-")) / "store"
base = SimConfig(model="gpt-oss-120b", gpu="H200", tp=8, page_size=64)
grid = ["mem-fraction-static=0.06,0.063,0.066", "swa-full-tokens-ratio=0.1,0.5,0.9"]
source = sweep(trace, base, grid, store)
points_table(source)"""
    ),
    new_markdown_cell("## 3. Plots"),
    new_code_cell(
        """data = analyse(source, slo=SLO)
fig = data["figures"]
for name in ("heatmap_hit_rate", "heatmap_ttft_p90"):
    display(Image(plots.png(plots.plot_heatmap(fig[name]))))
display(Image(plots.png(plots.plot_capacity(fig["capacity"]))))"""
    ),
    new_code_cell(
        """rec = data["recommended"]
for p in fig["pareto"]:
    display(Image(plots.png(plots.plot_pareto(p, (rec["cost_per_hour"], rec["metrics"].get(p["metric"]))))))
display(Image(plots.png(plots.plot_usage(fig["usage"]))))"""
    ),
    new_markdown_cell("## 4. Choose, and the flags to launch SGLang with"),
    new_code_cell(
        """print(rec["rule"], "| SLOs met:", rec["met"])
print({k: v for k, v in rec["metrics"].items()})
print(f"KV memory: {rec['memory']['gpu_kv_gib']:.2f} GiB GPU, cost {rec['cost_per_hour']:.3f} USD/hour")
print()
print("python -m sglang.launch_server", rec["launch_flags"])
assert rec["met"] is not None and rec["launch_flags"].startswith("--model-path")"""
    ),
]

POLICY = [
    new_markdown_cell(
        "# Policy comparison: SWA eviction × tombstoning × HiCache write policy\n\n"
        "One trace (RAGPulse, page size 16), every tombstoning × SWA-eviction pair and every HiCache "
        "write policy, measured against the optimal bound (docs/optimal-bound.md). Batch-1 replays "
        "(`kvplan cache-replay`'s setting, where the bound holds) and served runs (`kvplan run`, "
        "batched) are shown apart. Served runs of this kvplan refuse HiCache, so the write policies "
        "are compared at batch 1 only (`cache-replay --enable-hierarchical-cache`'s library path). "
        "Logic: `simulator.reports.policies`; this notebook only calls and plots."
    ),
    new_code_cell(
        SETUP
        + """
import pandas as pd

from simulator import SimConfig
from simulator.reports import plots
from simulator.reports import policies as P
from simulator.reports.analysis import load

LIMIT = int(os.environ.get("KVPLAN_NB_LIMIT", "150"))
trace = load("traces/data/ragpulse", limit=LIMIT)
pools = P.ReplayPools()  # full 6000, SWA 5000 tokens, window 128, page 16, host ratio 2
workload = P.trace_workload(trace, pools.page_size)
pools"""
    ),
    new_markdown_cell("## Batch 1: every policy against the optimal bound"),
    new_code_cell(
        """bound = P.bounds(workload, pools)
replay_rows = P.replay_grid(workload, pools)
hicache_rows = P.hicache_grid(workload, pools)
display(pd.DataFrame(replay_rows))
display(pd.DataFrame(hicache_rows))
bound"""
    ),
    new_code_cell(
        """display(Image(plots.png(plots.plot_policies(replay_rows, hicache_rows, bound))))
served_ok = [r["hit_rate"] for r in replay_rows if r["hit_rate"] is not None]
assert all(h <= bound["device"] + 1e-12 for h in served_ok), "a policy above the optimal bound"
assert all(r["hit_rate"] <= bound["device_plus_host"] + 1e-12 for r in hicache_rows if r["hit_rate"] is not None)
print(f"best policy {max(served_ok):.4f}, bound {bound['device']:.4f}: gap {bound['device'] - max(served_ok):.4f}")"""
    ),
    new_markdown_cell("## Served runs (continuous batching): hit rate and p90 TTFT"),
    new_code_cell(
        """base = SimConfig(tp=8, page_size=16, max_total_tokens=12000, swa_full_tokens_ratio=0.5)
served_rows = P.served_grid(trace, base)
display(Image(plots.png(plots.plot_served(served_rows))))
pd.DataFrame(served_rows)"""
    ),
]


def write(name: str, cells: list) -> None:
    nb = new_notebook(cells=cells)
    for i, cell in enumerate(nb.cells):
        cell.id = f"{Path(name).stem}-{i}"  # stable ids: a rebuild changes nothing
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    nbformat.validate(nb)
    nbformat.write(nb, HERE / name)


if __name__ == "__main__":
    write("capacity_analysis.ipynb", CAPACITY)
    write("policy_comparison.ipynb", POLICY)
