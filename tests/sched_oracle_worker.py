"""Long-lived SGLang scheduler oracle (run with the oracle venv's python).

Importing sglang costs seconds to a minute; a small workload replays in a fraction of a second.
This worker imports ``drive_scheduler`` once and replays many workloads, as SCHEDULER.md ("Many
workloads in one process") prescribes: per workload ``resolve_args(flags)`` then ``main(args)``,
whose lines equal a fresh CLI run's. One worker serves one environment setting: the refresh
knob (``--refresh on|off``) is set before the import, since SGLang reads knobs at import time.

Protocol (JSON lines): start-up prints ``{"ready": true}``; a request ``{"id", "flags": [...],
"rows": [...]}`` is answered with ``{"id", "ok": true, "rc", "lines": [...]}`` (the oracle's step,
request and run lines) or ``{"id", "ok": false, "error"}``. EOF ends the worker.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import traceback


def main() -> None:
    p = argparse.ArgumentParser(prog="sched_oracle_worker.py")
    p.add_argument("--oracle-dir", required=True)
    p.add_argument("--refresh", choices=["on", "off"], default="on")
    own = p.parse_args()
    os.environ["SGLANG_ENABLE_WAITING_PREFIX_REFRESH"] = "1" if own.refresh == "on" else "0"
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything else printing to stdout goes to stderr
    sys.path.insert(0, own.oracle_dir)
    import drive_scheduler  # noqa: PLC0415

    proto.write(json.dumps({"ready": True}) + "\n")
    tmp = tempfile.mkdtemp(prefix="sched_oracle_")
    for line in sys.stdin:
        msg = json.loads(line)
        try:
            wl, out = os.path.join(tmp, "w.jsonl"), os.path.join(tmp, "out.jsonl")
            with open(wl, "w") as f:
                for row in msg["rows"]:
                    f.write(json.dumps(row) + "\n")
            flags = ["--workload", wl, "--out", out, *msg.get("flags", [])]
            flags += ["--waiting-prefix-refresh", own.refresh]
            _, args = drive_scheduler.resolve_args(flags)
            with contextlib.redirect_stderr(io.StringIO()):
                try:
                    rc = drive_scheduler.main(args)
                except SystemExit as e:  # the driver's own input checks
                    raise RuntimeError(str(e)) from None
            with open(out) as f:
                lines = [json.loads(x) for x in f]
            ans = {"id": msg.get("id"), "ok": True, "rc": rc, "lines": lines}
        except Exception as e:  # noqa: BLE001 -- reported to the client, the worker lives on
            ans = {"id": msg.get("id"), "ok": False, "error": f"{type(e).__name__}: {e}",
                   "traceback": traceback.format_exc()}  # fmt: skip
        proto.write(json.dumps(ans) + "\n")


if __name__ == "__main__":
    main()
