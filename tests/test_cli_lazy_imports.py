"""A plain ``kvplan run`` (a preset model, no HiCache, 0.5.23's tree) does not import the modules
that only other configurations use: they load on first use (issue 14: start-up time)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: Loaded only by a DeepSeek-V4 model, a config.json model, the 0.5.9-0.5.15 tree, a request cut
#: to fit (--allow-auto-truncate), a closed-loop trace, the text report (not --json).
LAZY = (
    "simulator.sizing.dsv4",
    "simulator.models.hf_config",
    "simulator.radix.legacy",
    "simulator.engine.truncation",
    "traces.closed_loop",
    "simulator.engine.report",
)

_PROBE = """
import json, sys
from simulator.cli.main import app
try:
    app(sys.argv[1:])
except SystemExit as exc:
    assert not exc.code, exc.code
print(json.dumps(sorted(m for m in sys.modules if m.startswith(("simulator", "traces", "policies")))))
"""

_RECORDS = [
    {"timestamp": 0, "input_length": 1500, "output_length": 20, "hash_ids": [1, 2, 3]},
    {"timestamp": 10, "input_length": 2000, "output_length": 10, "hash_ids": [1, 2, 4, 5]},
    {"timestamp": 20, "input_length": 900, "output_length": 5, "hash_ids": [6, 7]},
]


def _modules_after(*args: str) -> set[str]:
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, *args], cwd=REPO, capture_output=True, text=True, check=True
    )
    return set(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_plain_run_skips_unused_modules(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in _RECORDS))
    args = ["run", "--trace", str(trace), "--model", "gpt-oss-120b", "--gpu", "H200", "--tp", "8"]
    mods = _modules_after(*args, "--page-size", "64", "--json", "--no-progress")
    assert "simulator.engine.simulate" in mods  # the run really ran
    assert mods.isdisjoint(LAZY), sorted(mods & set(LAZY))


def test_lazy_names_still_import() -> None:
    """The old import paths keep working (they load the module on access)."""
    from simulator.models import model_from_hf_config
    from simulator.models.hf_config import model_from_hf_config as direct

    assert model_from_hf_config is direct
