"""Run a snippet in a child interpreter on the compiled or the pure-Python build of the
checkout, and read the JSON line it prints last (the compiled-build equality tests)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_child(code: str, pure: bool) -> dict:
    """``code``'s last printed line, parsed; ``pure`` sets KVPLAN_PURE_PYTHON=1 in the child."""
    env = {k: v for k, v in os.environ.items() if k not in ("KVPLAN_PURE_PYTHON", "KVPLAN_REQUIRE_COMPILED")}
    if pure:
        env["KVPLAN_PURE_PYTHON"] = "1"
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, cwd=ROOT, env=env, capture_output=True, text=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])
