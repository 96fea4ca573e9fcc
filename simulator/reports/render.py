"""A report's text as a list of blocks, rendered once as Markdown and once as HTML.

:func:`blocks` turns the assembled data (:func:`simulator.reports.data.assemble`) into
headings, paragraphs, code, images, tables and lists; :func:`to_markdown` and :func:`to_html`
render the same blocks, so the two files never disagree. The HTML is one self-contained file:
its images are ``data:`` URIs and it loads nothing else.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Mapping
from typing import Any

from simulator.reports.plots import title_of

Block = tuple  # ("h1"|"h2"|"p"|"code"|"img"|"table"|"ul", ...)


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def figure_names(data: Mapping[str, Any]) -> list[str]:
    """The PNG files of a report, in the order they appear."""
    pareto = [f"pareto_{p['metric'].replace('.', '_')}.png" for p in data["figures"]["pareto"]]
    return ["heatmap_hit_rate.png", "heatmap_ttft_p90.png", "capacity.png", "usage.png", *pareto]


def blocks(data: Mapping[str, Any]) -> list[Block]:
    """The report, top to bottom."""
    rec, asm = data["recommended"], data["assumptions"]
    trace = asm["trace"]
    out: list[Block] = [
        ("h1", f"kvplan capacity report: {trace.get('source') or 'trace'}"),
        (
            "p",
            f"{asm['model']} on {asm['tp']}× {asm['gpu']}, page size {asm['page_size']}; "
            f"{asm['points']} configurations from the {data['source']['kind']} at {data['source']['path']}.",
        ),
        ("h2", "Recommended launch flags"),
        ("code", rec["launch_flags"]),
        ("p", f"Rule: {rec['rule']}." + ("" if rec["met"] is None else f" SLOs met: {_fmt(rec['met'])}.")),
        ("p", "`--model-path` is kvplan's model name: give SGLang the model's path or hub id there."),
        (
            "table",
            ["metric", "value"],
            [[m, _fmt(v)] for m, v in rec["metrics"].items()]
            + [
                ["GPU KV memory (GiB, all ranks)", _fmt(rec["memory"]["gpu_kv_gib"])],
                ["host KV memory (GiB, all ranks)", _fmt(rec["memory"]["host_kv_gib"])],
                ["KV memory cost (USD/hour)", _fmt(rec["cost_per_hour"])],
                ["rerun reproduces the stored result", _fmt(rec["rerun_matches_store"])],
            ],
        ),
    ]
    if data["slo"]:
        out.append(("p", "SLOs: " + ", ".join(f"`{s}`" for s in data["slo"]) + " (and no failed request)."))
    out += _figure_blocks(data)
    out += [
        ("h2", "Top configurations"),
        (
            "p",
            "`meets`: no failed request"
            + (" and every SLO met" if data["slo"] else "")
            + "; cost in USD/hour.",
        ),
        _table_block(data["table"]),
    ]
    out += _assumption_blocks(data)
    if data["notes"]:
        out += [("h2", "Notes"), ("ul", list(data["notes"]))]
    return out


def _figure_blocks(data: Mapping[str, Any]) -> list[Block]:
    fig = data["figures"]
    hm = fig["heatmap_hit_rate"]
    fixed = ", ".join(f"{k} {_fmt(v)}" for k, v in hm["fixed"].items())
    axes_text = f"x: {hm['x']['flag'] or 'none'}, y: {hm['y']['flag'] or 'none (a single row)'}"
    cap = fig["capacity"]
    out: list[Block] = [
        ("h2", "Hit rate and p90 TTFT over the sweep"),
        (
            "p",
            f"Axes {axes_text}"
            + (f"; held at {fixed}" if fixed else "")
            + ". Grey: refused; ×: failed requests.",
        ),
    ]
    out += [("p", f"Note: {n}") for n in data["notes"] if "axis" in n or "axes" in n]
    out += [
        ("img", "heatmap_hit_rate.png", "hit rate heatmap"),
        ("img", "heatmap_ttft_p90.png", "p90 TTFT heatmap"),
        ("h2", "Hit rate against capacity"),
        (
            "p",
            f"The optimal bound (Belady on the page tree; docs/optimal-bound.md) and LRU's hit-ratio "
            f"curve at page size {cap['page_size']}, batch 1 in file order with the SWA pool never short, "
            f"against the sweep's served runs (batched, so not bounded by the batch-1 curves). Working set "
            f"{cap['working_set_tokens']:,} tokens; unbounded pools reach "
            f"{cap['infinite_capacity_hit_rate']:.4f}.",
        ),
        ("img", "capacity.png", "hit rate against capacity"),
        ("h2", "Token usage over time (recommended configuration)"),
        (
            "p",
            "Tokens in use in each pool (SGLang's `#full token` / `#swa token`: neither free nor "
            "evictable cache) after every prefill batch and decode step of one run of the recommended "
            "flags, with the pool capacities" + _host_note(fig["usage"]) + ".",
        ),
        ("img", "usage.png", "token usage over time"),
        ("h2", "Pareto frontiers: memory cost against each metric"),
    ]
    for p in fig["pareto"]:
        name = f"pareto_{p['metric'].replace('.', '_')}.png"
        out.append(("img", name, f"Pareto frontier of cost against {title_of(p['metric'])}"))
    return out


def _host_note(usage: Mapping[str, Any]) -> str:
    if any(k.startswith("host_") for k in usage["series"]):
        return ""
    return "; this run has no host (HiCache) pool"


def _table_block(rows: list[dict[str, Any]]) -> Block:
    if not rows:
        return ("p", "(no point)")
    header = [k for k in rows[0] if k != "error"]
    body = [[_fmt(r[k]) if k != "meets" or r["error"] is None else "refused" for k in header] for r in rows]
    return ("table", header, body)


def _assumption_blocks(data: Mapping[str, Any]) -> list[Block]:
    asm = data["assumptions"]
    prov = asm["provenance"]
    trace_rows = [
        [k, _fmt(v) if not isinstance(v, dict) else ", ".join(f"{a} {_fmt(b)}" for a, b in v.items())]
        for k, v in asm["trace"].items()
    ]
    pools = ", ".join(f"{k} {_fmt(v)}" for k, v in asm["pools"].items() if v)
    return [
        ("h2", "Assumptions"),
        (
            "ul",
            [
                f"model {asm['model']}, GPU {asm['gpu']}, TP {asm['tp']}, page size {asm['page_size']}, "
                f"sliding window {_fmt(asm['sliding_window'])}",
                f"recommended pools (tokens): {pools}",
                f"cost-model profile: {asm['profile']['name']} ({asm['profile']['hash']})",
                f"prices (USD per GiB-hour): GPU {asm['prices_usd_per_gib_hour']['gpu']}, "
                f"host {asm['prices_usd_per_gib_hour']['host']}",
                f"seeds: {', '.join(map(str, asm['seeds']))}",
                *[f"SGLang sizing: {n}" for n in asm["sizing_notes"]],
            ],
        ),
        ("h3", "Trace statistics"),
        ("table", ["statistic", "value"], trace_rows),
        ("h3", "Provenance"),
        (
            "ul",
            [
                f"kvplan {prov['kvplan_version']} (sources {prov['kvplan_source_hash']}), "
                f"SGLang {prov['sglang_version']} modelled",
                f"trace {prov['trace_source']} (content hash {prov['trace_hash']})",
                f"profile {prov['profile']['name']} ({prov['profile']['hash']})",
            ],
        ),
    ]


def to_markdown(items: list[Block], figure_dir: str = "figures") -> str:
    lines: list[str] = []
    for b in items:
        kind = b[0]
        if kind in ("h1", "h2", "h3"):
            lines += ["#" * int(kind[1]) + " " + b[1], ""]
        elif kind == "p":
            lines += [b[1], ""]
        elif kind == "code":
            lines += ["```", b[1], "```", ""]
        elif kind == "img":
            lines += [f"![{b[2]}]({figure_dir}/{b[1]})", ""]
        elif kind == "ul":
            lines += [f"- {item}" for item in b[1]] + [""]
        elif kind == "table":
            lines += ["| " + " | ".join(b[1]) + " |", "|" + "---|" * len(b[1])]
            lines += ["| " + " | ".join(row) + " |" for row in b[2]] + [""]
    return "\n".join(lines)


_CSS = (
    "body{font-family:sans-serif;max-width:980px;margin:2em auto;color:#222;line-height:1.45}"
    "table{border-collapse:collapse;font-size:13px;margin:0.5em 0}"
    "td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}th{background:#f2f2f2}"
    "pre{background:#f6f6f6;padding:0.7em;white-space:pre-wrap}"
    "img{max-width:100%;display:block;margin:0.6em 0}"
)


def to_html(items: list[Block], images: Mapping[str, bytes]) -> str:
    """One self-contained page; ``images`` by file name, embedded as ``data:`` URIs."""
    title = next((b[1] for b in items if b[0] == "h1"), "kvplan report")
    body: list[str] = []
    esc = html.escape
    for b in items:
        kind = b[0]
        if kind in ("h1", "h2", "h3"):
            body.append(f"<{kind}>{esc(b[1])}</{kind}>")
        elif kind == "p":
            body.append("<p>" + re.sub(r"`([^`]+)`", r"<code>\1</code>", esc(b[1])) + "</p>")
        elif kind == "code":
            body.append(f"<pre><code>{esc(b[1])}</code></pre>")
        elif kind == "img":
            uri = "data:image/png;base64," + base64.b64encode(images[b[1]]).decode()
            body.append(f'<img src="{uri}" alt="{esc(b[2])}">')
        elif kind == "ul":
            body.append("<ul>" + "".join(f"<li>{esc(i)}</li>" for i in b[1]) + "</ul>")
        elif kind == "table":
            head = "".join(f"<th>{esc(h)}</th>" for h in b[1])
            rows = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in b[2])
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(title)}</title><style>{_CSS}</style></head>\n<body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )
