"""``kvplan plan ... -o DIR`` writes the plan's report into DIR (docs/planner.md, docs/reports.md)."""

from __future__ import annotations

import json

from test_plan_cli import PLAN, SLO, _invoke


def test_plan_output_directory_holds_its_report(tmp_path):
    out = tmp_path / "plan"
    printed = json.loads(_invoke(["plan", *PLAN, "--slo", SLO, "-o", str(out), "--json"]).stdout)
    for name in ("index.html", "report.md", "figures.json", "plan.json", "store/kvplan-store.json"):
        assert (out / name).is_file(), name
    assert any((out / "figures").iterdir())
    plan = json.loads((out / "plan.json").read_text())
    assert plan["recommended"] == printed["recommended"]  # plan.json survives the report
    report = json.loads((out / "figures.json").read_text())
    # the report shows the plan's recommended point (matched to a store point), not its own pick
    want = plan["recommended"]["flags"]
    assert {k: report["recommended"]["flags"].get(k) for k in want} == want
    assert report["recommended"]["rule"] == "the plan's recommendation (plan.json)"
    assert report["recommended"]["met"] is plan["met"] is True
    assert not any("match no point" in n for n in report["notes"])
    # and the plan's SLOs (the implied failed==0 is the report's own "no failed request")
    assert sorted(report["slo"]) == sorted(t for t, s in plan["slo"].items() if not s.get("implied"))
    md = (out / "report.md").read_text()
    assert "`cache_hit_rate>=0.2`" in md and "`ttft.p90<=2`" in md
    assert report["recommended"]["launch_flags"] in md
