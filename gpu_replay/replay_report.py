"""The replay's outputs: the per-step table (CSV, written atomically) and a summary (plain data)."""

from __future__ import annotations

import csv
import io
import json
import os
import platform
import subprocess
import tempfile
from dataclasses import fields
from pathlib import Path

import numpy as np
import torch

from gpu_replay.oplog_replay import OpLogReplay, StepRow
from traces.output import umask_mode

__all__ = ["TABLE_COLUMNS", "device_info", "summarize", "write_json", "write_table"]

TABLE_COLUMNS = tuple(f.name for f in fields(StepRow)) + ("mem_s",)


def _atomic_write(path: str | Path, text: str) -> Path:
    """A temporary file in the target folder (umask mode), then a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, umask_mode())
        with os.fdopen(fd, "w", newline="") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_table(path: str | Path, rows: list[StepRow]) -> Path:
    """One CSV row per step, written atomically."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(TABLE_COLUMNS)
    for r in rows:
        w.writerow([_cell(getattr(r, c)) for c in TABLE_COLUMNS])
    return _atomic_write(path, buf.getvalue())


def _cell(v: object) -> object:
    """Lists (per-call pages and seconds) as ``;``-joined values."""
    return ";".join(f"{x:.9g}" if isinstance(x, float) else str(x) for x in v) if isinstance(v, list) else v


def write_json(path: str | Path, data: dict) -> Path:
    """The summary as JSON, written atomically."""
    return _atomic_write(path, json.dumps(data, indent=1) + "\n")


def device_info(device: str) -> dict:
    """Device, driver, torch and CUDA versions: a measurement's provenance."""
    info = {
        "device": str(device),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "host": platform.node(),
    }
    if str(device).startswith("cuda") and torch.cuda.is_available():
        info["name"] = torch.cuda.get_device_name()
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
            )
            info["driver"] = out.stdout.strip().splitlines()[0] if out.stdout.strip() else None
        except (OSError, subprocess.SubprocessError):
            info["driver"] = None
    else:
        info["name"] = platform.processor() or platform.machine()
    return info


def _pct(values: np.ndarray) -> dict:
    if not len(values):
        return {}
    q = np.percentile(values, [50, 90, 99])
    return {"p50": float(q[0]), "p90": float(q[1]), "p99": float(q[2]), "max": float(values.max())}


def summarize(replay: OpLogReplay, rows: list[StepRow], wall_s: float) -> dict:
    """Totals, per-step distributions and what was checked and left out."""
    mem = np.array([r.mem_s for r in rows if r.records])
    written = sum(r.written_bytes for r in rows)
    backed = sum(r.backup_bytes for r in rows)
    write_s = sum(r.write_s for r in rows)
    backup_s = sum(r.backup_s for r in rows)
    loaded = sum(r.load_bytes for r in rows)
    load_s = sum(r.load_s for r in rows)
    sim_s = sum(r.sim_duration_s for r in rows)
    o = replay.options
    return {
        "steps": len(rows),
        "steps_with_records": int(len(mem)),
        "records_replayed": dict(replay.replayed),
        "records_not_replayed": dict(replay.not_replayed),
        "pools": {
            n: {
                "layers": p.geo.layer_num,
                "pages": p.geo.device_pages - 1,
                "bytes_per_page": p.bytes_per_page,
            }
            for n, p in replay.pools.items()
        },
        "layers_replayed_of": {
            "full": len(replay.log.header["geometry"]["full_layer_ids"]),
            "swa": len(replay.log.header["geometry"]["swa_layer_ids"]),
        },
        "pages_written": {
            "full": sum(r.alloc_full_pages for r in rows),
            "swa": sum(r.alloc_swa_pages for r in rows),
        },
        "written_bytes": written,
        "write_s": write_s,
        "write_gbps": written / write_s / 1e9 if write_s else None,
        "backup_pages": sum(r.backup_pages for r in rows),
        "backup_bytes": backed,
        "backup_s": backup_s,
        "backup_gbps": backed / backup_s / 1e9 if backup_s else None,
        "load_pages": sum(r.load_pages for r in rows),
        "load_bytes": loaded,
        "load_s": load_s,
        "load_gbps": loaded / load_s / 1e9 if load_s else None,
        "mem_s": write_s + backup_s + load_s,
        "mem_s_per_step": _pct(mem),
        "simulated_s": sim_s,
        "mem_fraction_of_simulated": (write_s + backup_s + load_s) / sim_s if sim_s else None,
        "checks": replay.checks,
        "verify": o.verify,
        "options": {
            "device": o.device,
            "io_backend": o.io_backend,
            "impl": o.impl,
            "layout": o.layout,
            "layers": o.layers,
            "write_back": o.write_back,
            "isolate_calls": o.isolate_calls,
        },
        "environment": device_info(o.device),
        "wall_s": wall_s,
    }
