"""The transfer cost model of HiCache write-back calls, fitted on op-log replays (issue 13, item 5).

Data: ``kvplan gpu-replay`` with write-back records each backup call's pages and seconds
(``backup_call_pages`` / ``backup_call_s``), and ``benchmarks/gpu_transfer_calib.py`` replays each
calibration log several times. :func:`compact_calls` folds those per-step CSVs into one table per
implementation (one row per call, one seconds column per repeat); the fit reads only that.

Model forms (seconds of one step's write-back, a sum over its calls; ``p`` pages per call):

- ``per_call``: ``calls x a + pages x b``: one overhead per call and a bandwidth, the form of the
  simulator's :class:`simulator.cost.hicache_transfer.HostTransferModel` (kernel io-backend);
- ``first_next``: ``a_first + (calls - 1) x a_next + pages x b``: the first call of a step pays
  more than the calls issued right behind it (measured: about 25 us more for the ``cuda`` kernel;
  the host's issue path is cold after the scheduler's work);
- ``first_next_single``: ``first_next`` plus ``c`` per single-page call (a small-call term).

The coefficients are fitted on the ``fit`` logs of gpu_replay/calibration/split.json only (relative
least squares, L2 or L1, over each step's median of the repeats); the form and the objective are
chosen by leave-one-log-out cross-validation between the fit logs, so the held-out logs play no
part in any choice; the report gives the held-out median absolute % error per step against the
median of the repeats (and against each single repeat).

    python -m gpu_replay.transfer_model --results gpu_replay/results/transfer-2026-11-26-s4
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = [
    "FORMS",
    "CallTable",
    "compact_calls",
    "cross_validate",
    "fit",
    "load_calls",
    "step_arrays",
]

SPLIT = Path(__file__).resolve().parent / "calibration" / "split.json"
FORMS = ("per_call", "first_next", "first_next_single")
OBJECTIVES = ("l2", "l1")


@dataclass
class CallTable:
    """One implementation's write-back calls: per call its log, step, position in the step,
    pages, and seconds in each repeat (``secs``: calls x repeats)."""

    log: np.ndarray
    step: np.ndarray
    call: np.ndarray
    pages: np.ndarray
    secs: np.ndarray

    def select(self, logs: list[str]) -> CallTable:
        m = np.isin(self.log, logs)
        return CallTable(self.log[m], self.step[m], self.call[m], self.pages[m], self.secs[m])


def compact_calls(csv_by_log: dict[str, list[Path]], out: Path) -> Path:
    """One gzipped CSV of every write-back call of every log (``log, step, call, pages, s0..sN``)
    from each log's per-step replay tables (one per repeat, same op log, so the same calls)."""
    reps = {len(v) for v in csv_by_log.values()}
    if len(reps) != 1:
        raise ValueError(f"every log needs the same number of repeats, got {sorted(reps)}")
    n = reps.pop()
    with gzip.open(out, "wt", newline="") as f:
        w = csv.writer(f)
        w.writerow(["log", "step", "call", "pages", *[f"s{i}" for i in range(n)]])
        for log, paths in csv_by_log.items():
            tables = [_calls_of(p) for p in paths]
            for (step, call, pages, s0), *others in zip(*tables, strict=True):
                if any(o[:3] != (step, call, pages) for o in others):
                    raise ValueError(f"{log}: the repeats disagree on the calls of step {step}")
                w.writerow([log, step, call, pages, f"{s0:.9g}", *[f"{o[3]:.9g}" for o in others]])
    return out


def _calls_of(path: Path) -> list[tuple[int, int, int, float]]:
    out = []
    with path.open() as f:
        for r in csv.DictReader(f):
            if not int(r["backup_calls"]):
                continue
            pages = [int(x) for x in r["backup_call_pages"].split(";")]
            secs = [float(x) for x in r["backup_call_s"].split(";")]
            out.extend((int(r["step"]), i, p, s) for i, (p, s) in enumerate(zip(pages, secs, strict=True)))
    return out


def load_calls(path: Path) -> CallTable:
    with gzip.open(path, "rt") as f:
        rows = list(csv.reader(f))
    head, body = rows[0], rows[1:]
    k = head.index("pages") + 1
    return CallTable(
        log=np.array([r[0] for r in body]),
        step=np.array([int(r[1]) for r in body]),
        call=np.array([int(r[2]) for r in body]),
        pages=np.array([int(r[3]) for r in body], dtype=float),
        secs=np.array([[float(x) for x in r[k:]] for r in body]),
    )


def _call_features(t: CallTable, form: str) -> np.ndarray:
    first = (t.call == 0).astype(float)
    if form == "per_call":
        return np.stack([np.ones_like(first), t.pages], axis=1)
    cols = [first, 1.0 - first, t.pages]
    if form == "first_next_single":
        cols.append((t.pages == 1).astype(float))
    elif form != "first_next":
        raise ValueError(f"form must be one of {FORMS}, not {form!r}")
    return np.stack(cols, axis=1)


def step_arrays(t: CallTable, form: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per step: the summed call features, the seconds per repeat, and the step's log."""
    feats = _call_features(t, form)
    key = np.char.add(np.char.add(t.log.astype(str), "#"), t.step.astype(str))
    uniq, inv = np.unique(key, return_inverse=True)
    x = np.zeros((len(uniq), feats.shape[1]))
    y = np.zeros((len(uniq), t.secs.shape[1]))
    np.add.at(x, inv, feats)
    np.add.at(y, inv, t.secs)
    logs = np.array([u.split("#", 1)[0] for u in uniq])
    return x, y, logs


def fit(x: np.ndarray, y: np.ndarray, objective: str = "l2", iters: int = 60) -> np.ndarray:
    """Coefficients minimising the relative error of ``x @ c`` against ``y`` (L2: least squares;
    L1: least absolute, by iteratively reweighted least squares)."""
    w = np.ones(len(y))
    c = np.linalg.lstsq(x / y[:, None], w, rcond=None)[0]
    if objective == "l2":
        return c
    if objective != "l1":
        raise ValueError(f"objective must be one of {OBJECTIVES}, not {objective!r}")
    for _ in range(iters):
        r = np.abs(x @ c / y - 1.0)
        w = 1.0 / np.sqrt(np.maximum(r, 1e-4))
        c = np.linalg.lstsq(x * w[:, None] / y[:, None], w, rcond=None)[0]
    return c


def _errors(c: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Median |% error| against the median of the repeats, and against every single repeat."""
    pred = x @ c
    med = np.median(y, axis=1)
    return (
        float(np.median(np.abs(pred / med - 1.0)) * 100.0),
        float(np.median(np.abs(pred[:, None] / y - 1.0)) * 100.0),
    )


def cross_validate(t: CallTable, fit_logs: list[str]) -> list[dict]:
    """Leave-one-log-out over the fit logs for every form and objective; sorted best first."""
    out = []
    for form in FORMS:
        x, y, logs = step_arrays(t, form)
        for obj in OBJECTIVES:
            errs = []
            for held in fit_logs:
                train = np.isin(logs, [lg for lg in fit_logs if lg != held])
                test = logs == held
                c = fit(x[train], np.median(y[train], axis=1), obj)
                errs.append(_errors(c, x[test], y[test])[0])
            out.append({"form": form, "objective": obj, "cv_median_abs_pct": float(np.mean(errs))})
    return sorted(out, key=lambda r: r["cv_median_abs_pct"])


def evaluate(t: CallTable, split: dict, form: str, objective: str) -> dict:
    """Fit on the fit logs, report fit and held-out errors (per log too)."""
    names = {part: [Path(p).stem for p in split["oplogs"][part]] for part in ("fit", "heldout")}
    x, y, logs = step_arrays(t, form)
    train = np.isin(logs, names["fit"])
    c = fit(x[train], np.median(y[train], axis=1), objective)
    res: dict = {"form": form, "objective": objective, "coefficients_s": [float(v) for v in c]}
    for part, members in names.items():
        m = np.isin(logs, members)
        med, each = _errors(c, x[m], y[m])
        res[part] = {"steps": int(m.sum()), "median_abs_pct": med, "each_repeat_median_abs_pct": each}
        med_y = np.median(y[m], axis=1)
        res[part]["repeat_noise_pct"] = float(np.median(np.abs(y[m] / med_y[:, None] - 1.0)) * 100.0)
        res[part]["per_log"] = {}
        for lg in members:
            k = logs == lg
            pred, meas = x[k] @ c, np.median(y[k], axis=1)
            res[part]["per_log"][lg] = {
                "steps": int(k.sum()),
                "median_abs_pct": float(np.median(np.abs(pred / meas - 1.0)) * 100.0),
                "median_signed_pct": float(np.median(pred / meas - 1.0) * 100.0),
                "total_pct": float((pred.sum() / meas.sum() - 1.0) * 100.0),
            }
    return res


def named(form: str, c: list[float], page_bytes: int) -> dict:
    """The coefficients by name, with the bandwidth per page in GB/s."""
    keys = {
        "per_call": ("per_call_s", "per_page_s"),
        "first_next": ("first_call_s", "next_call_s", "per_page_s"),
        "first_next_single": ("first_call_s", "next_call_s", "per_page_s", "single_page_call_s"),
    }[form]
    out = dict(zip(keys, c, strict=True))
    out["gbps"] = page_bytes / out["per_page_s"] / 1e9
    return out


def other_machine(train: CallTable, test: CallTable, split: dict, form: str, objective: str) -> float:
    """Coefficients fitted on ``train``'s fit logs, scored on ``test``'s held-out logs (another
    machine's replays of them): median |% error| per step against ``test``'s repeat median."""
    fit_logs = [Path(p).stem for p in split["oplogs"]["fit"]]
    held = [Path(p).stem for p in split["oplogs"]["heldout"]]
    x, y, logs = step_arrays(train, form)
    m = np.isin(logs, fit_logs)
    c = fit(x[m], np.median(y[m], axis=1), objective)
    xt, yt, lt = step_arrays(test, form)
    k = np.isin(lt, held)
    return _errors(c, xt[k], yt[k])[0]


def _impl(name: str) -> str:
    """``calls-<machine>-<impl>[-iso]`` -> ``<impl>``."""
    return name.removeprefix("calls-").split("-", 1)[1].removesuffix("-iso")


def report(results: Path, page_bytes: int) -> dict:
    """Cross-validation, the chosen form's held-out errors and every form's, per calls table;
    and each table's chosen fit scored on the other machines' held-out replays of that kernel."""
    split = json.loads(SPLIT.read_text())
    fit_logs = [Path(p).stem for p in split["oplogs"]["fit"]]
    out: dict = {}
    tables = {p.name.removesuffix(".csv.gz"): load_calls(p) for p in sorted(results.glob("calls-*.csv.gz"))}
    for name, t in tables.items():
        cv = cross_validate(t, fit_logs)
        chosen = evaluate(t, split, cv[0]["form"], cv[0]["objective"])
        chosen["named"] = named(chosen["form"], chosen["coefficients_s"], page_bytes)
        every = {
            f"{f}/{o}": evaluate(t, split, f, o)["heldout"]["median_abs_pct"]
            for f in FORMS
            for o in OBJECTIVES
        }
        sim = evaluate(t, split, "per_call", "l2")
        sim["named"] = named("per_call", sim["coefficients_s"], page_bytes)
        others = {
            o: other_machine(t, tables[o], split, chosen["form"], chosen["objective"])
            for o in tables
            if o != name and _impl(o) == _impl(name)
        }
        out[name] = {
            "repeats": int(t.secs.shape[1]),
            "cross_validation": cv,
            "chosen": chosen,
            "simulator_form": sim,
            "heldout_median_abs_pct_every_form": every,
            "heldout_median_abs_pct_on_other_machines": others,
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, required=True, help="folder with calls-*.csv.gz")
    ap.add_argument("--page-bytes", type=int, default=18 * 64 * 1024, help="bytes of one page, all layers")
    ap.add_argument("--out", type=Path, default=None, help="report JSON (default: RESULTS/transfer_fit.json)")
    args = ap.parse_args()
    rep = report(args.results, args.page_bytes)
    (args.out or args.results / "transfer_fit.json").write_text(json.dumps(rep, indent=1) + "\n")
    for name, r in rep.items():
        c, s = r["chosen"], r["simulator_form"]
        print(
            f"{name:28s} chosen {c['form']}/{c['objective']} held-out {c['heldout']['median_abs_pct']:.2f}% "
            f"(fit {c['fit']['median_abs_pct']:.2f}%, noise {c['heldout']['repeat_noise_pct']:.1f}%); "
            f"simulator form held-out {s['heldout']['median_abs_pct']:.2f}%; on other machines "
            + ", ".join(
                f"{k.split('-')[1]} {v:.2f}%"
                for k, v in r["heldout_median_abs_pct_on_other_machines"].items()
            )
        )


if __name__ == "__main__":
    main()
