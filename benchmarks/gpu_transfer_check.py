"""The transfer half of issue 13's calibration check, in a short device slot (seventh session):
``kvplan gpu-replay`` of the calibration op logs (held-out and fit, split.json) with HiCache
write-back through the ``cuda`` row kernel, calls isolated as in the committed fit, in passes over
the logs until ``--budget-s`` (at least one pass). Writes one calls table
(``calls-<tag>-cuda-iso.csv.gz``, gpu_replay.transfer_model's format) and ``transfer_check.json``:

- the committed transfer fit (machine m3 of session four, ``calls-h100m3-cuda-iso``: its
  cross-validated form, and the simulator's per-call form that the cost profile's
  ``hicache_transfer`` carries) scored on **this** machine's held-out replays;
- this machine's own fit (fit logs only; form chosen by leave-one-log-out CV), if a whole pass
  over the fit logs was replayed.

    python benchmarks/gpu_transfer_check.py --out $OUT --budget-s 100
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

COMMITTED = ROOT / "gpu_replay" / "results" / "transfer-2026-11-26-s4" / "calls-h100m3-cuda-iso.csv.gz"
PAGE_BYTES = 18 * 64 * 1024


def cuda_options():
    """The committed fit's replay options: ``cuda`` row kernel, layer_first, calls isolated."""
    import gpu_calibrate as cal  # stubs the trace readers where pandas is missing

    from gpu_replay.oplog_replay import ReplayOptions

    backend, impl, layout = cal.IMPLS["cuda"]
    return ReplayOptions(
        device="cuda", io_backend=backend, impl=impl, layout=layout, write_back=True, isolate_calls=True
    )


def replay_passes(logs: list[str], budget_s: float, tmp: Path, opts=None) -> dict[str, list[Path]]:
    """Per-step tables of each log, one per pass; passes over every log until the budget
    (``opts``: :func:`cuda_options` unless given, e.g. a CPU reference replay in the tests)."""
    import gpu_calibrate  # noqa: F401 - stubs the trace readers where pandas is missing
    import torch

    from gpu_replay.oplog_replay import OpLogReplay
    from gpu_replay.replay_report import summarize, write_table
    from simulator.oplog import read_op_log

    calib = ROOT / "gpu_replay" / "calibration"
    opts = opts or cuda_options()
    tables: dict[str, list[Path]] = {Path(rel).stem: [] for rel in logs}
    t0, rep = time.perf_counter(), -1
    while True:
        start = time.perf_counter()
        for rel in logs if rep >= 0 else logs[:1]:  # pass -1: warm-up (build, checks) on one log
            rp = OpLogReplay(read_op_log(calib / rel), opts if rep < 0 else _no_checks(opts))
            try:
                rows = rp.run()
            finally:
                rp.release()
            s = summarize(rp, rows, time.perf_counter() - start)
            print(
                f"replay pass {rep:2d} {Path(rel).stem:30s} backup {s['backup_gbps'] or 0:6.1f} GB/s",
                flush=True,
            )
            if rep >= 0:
                tables[Path(rel).stem].append(write_table(tmp / f"{Path(rel).stem}-r{rep}.csv", rows))
            del rp
            torch.cuda.empty_cache()
        took, rep = time.perf_counter() - start, rep + 1
        if rep >= 1 and time.perf_counter() - t0 + took > budget_s:
            return tables


def _no_checks(opts):
    from dataclasses import replace

    return replace(opts, verify="none")


def score(table_path: Path, split: dict) -> dict:
    """The committed m3 fit and this machine's own fit, on this machine's held-out replays."""
    import numpy as np

    from gpu_replay import transfer_model as tm

    fit_logs = [Path(p).stem for p in split["oplogs"]["fit"]]
    new, old = tm.load_calls(table_path), tm.load_calls(COMMITTED)
    out: dict = {"repeats": int(new.secs.shape[1]), "committed_table": COMMITTED.name}
    cv_old = tm.cross_validate(old, fit_logs)[0]
    for label, form, obj in (
        ("committed_cv_form", cv_old["form"], cv_old["objective"]),
        ("committed_simulator_form", "per_call", "l2"),
    ):
        out[label] = {"form": form, "objective": obj, "heldout": _heldout(old, new, split, form, obj)}
    if set(fit_logs) <= set(np.unique(new.log)):
        cv = tm.cross_validate(new, fit_logs)[0]
        own = tm.evaluate(new, split, cv["form"], cv["objective"])
        own["named"] = tm.named(own["form"], own["coefficients_s"], PAGE_BYTES)
        out["this_machine"] = own
    return out


def _heldout(train, test, split: dict, form: str, obj: str) -> dict:
    """``train``'s fit-log coefficients on ``test``'s held-out steps: median |% error| overall
    (against the repeat median) and per log."""
    import numpy as np

    from gpu_replay import transfer_model as tm

    fit_logs = [Path(p).stem for p in split["oplogs"]["fit"]]
    held = [Path(p).stem for p in split["oplogs"]["heldout"]]
    x, y, logs = tm.step_arrays(train, form)
    c = tm.fit(x[np.isin(logs, fit_logs)], np.median(y[np.isin(logs, fit_logs)], axis=1), obj)
    xt, yt, lt = tm.step_arrays(test, form)
    res: dict = {"coefficients": tm.named(form, list(map(float, c)), PAGE_BYTES)}
    k = np.isin(lt, held)
    res["median_abs_pct"], res["each_repeat_median_abs_pct"] = tm._errors(c, xt[k], yt[k])
    res["per_log"] = {
        lg: {"steps": int((lt == lg).sum()), "median_abs_pct": tm._errors(c, xt[lt == lg], yt[lt == lg])[0]}
        for lg in held
        if (lt == lg).any()
    }
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    ap.add_argument("--budget-s", type=float, default=100.0)
    ap.add_argument("--tag", default="dev")
    ap.add_argument("--score-only", type=Path, default=None, help="score an existing calls table (CPU)")
    args = ap.parse_args()
    from gpu_replay import transfer_model as tm

    split = json.loads((ROOT / "gpu_replay" / "calibration" / "split.json").read_text())
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    table = args.score_only
    if table is None:
        tmp = Path(tempfile.mkdtemp(prefix="tcheck-"))
        logs = [*split["oplogs"]["heldout"], *split["oplogs"]["fit"]]
        tables = replay_passes(logs, args.budget_s, tmp)
        table = args.out / f"calls-{args.tag}-cuda-iso.csv.gz"
        tm.compact_calls({k: v for k, v in tables.items() if v}, table)
        shutil.rmtree(tmp, ignore_errors=True)
    res = score(table, split)
    res["wall_s"] = time.perf_counter() - t0
    (args.out / "transfer_check.json").write_text(json.dumps(res, indent=1) + "\n")
    for label in ("committed_cv_form", "committed_simulator_form"):
        r = res[label]
        h = r["heldout"]
        per = ", ".join(f"{k} {v['median_abs_pct']:.2f}%" for k, v in h["per_log"].items())
        print(f"transfer {label} ({r['form']}/{r['objective']}): held-out {h['median_abs_pct']:.2f}% ({per})")
    if "this_machine" in res:
        own = res["this_machine"]
        print(
            f"transfer this machine ({own['form']}/{own['objective']}): held-out "
            f"{own['heldout']['median_abs_pct']:.2f}%, fit {own['fit']['median_abs_pct']:.2f}%, "
            f"repeat noise {own['heldout']['repeat_noise_pct']:.1f}%"
        )
    print(f"transfer check: {res['repeats']} passes, wall {res['wall_s']:.1f} s")


if __name__ == "__main__":
    main()
