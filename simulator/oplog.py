"""The op log: a recorded memory-operation stream on disk (npz), its reader and its replay.

Format (version 1) is documented field by field in docs/op-log.md. A writer writes to a
temporary name in the target folder and renames, so a reader never sees half a file; the
reader validates every field and names the file and the field in its errors.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simulator.errors import KvplanError
from simulator.kv_pages import HostPageState, SWAPageState
from simulator.memory_ops import HOST_ALLOCS, MemoryOp, MemoryOpExecutor, OpKind, StepInfo
from traces.output import umask_mode

FORMAT = "kvplan-oplog"
VERSION = 2  # 2: HiCache records with host page ids (``host_*``); version 1 logs still read
READS = (1, 2)
_ARRAYS = {  # name -> dtype kind ("i" int, "f" float, "U" str)
    "op_kind": "i",
    "op_step": "i",
    "op_reason": "i",
    "op_bound": "i",
    "full_offsets": "i",
    "full_pages": "i",
    "swa_offsets": "i",
    "swa_pages": "i",
    "src_offsets": "i",
    "src_pages": "i",
    "host_offsets": "i",
    "host_pages": "i",
    "page_steps": "i",
    "reasons": "U",
    "step_index": "i",
    "step_start_s": "f",
    "step_duration_s": "f",
}
_HEADER_KEYS = ("format", "version", "page_size", "full_pages", "swa_pages", "need_sort")


class OpLogError(KvplanError):
    """An op log that cannot be read: names the file and the field."""


@dataclass
class OpLog:
    """An op log in memory: its header and its records and steps."""

    header: dict
    ops: list[MemoryOp]
    steps: list[StepInfo]


def model_geometry(model, tp_size: int = 1, tp_rank: int = 0) -> dict:
    """The header's ``geometry`` from a :class:`~simulator.models.ModelSpec` (per TP rank)."""
    return dict(
        model=model.name,
        full_layer_ids=list(model.full_layer_ids),
        swa_layer_ids=list(model.swa_layer_ids),
        full_kv_heads=model.kv_heads_per_rank(tp_size),
        full_head_dim=model.head_dim,
        full_v_head_dim=model.v_head_dim,
        swa_kv_heads=model.swa_kv_heads_per_rank(tp_size),
        swa_head_dim=model.swa_head_dim,
        swa_v_head_dim=model.swa_v_head_dim,
        kv_dtype_bytes=model.kv_dtype_bytes,
        tp_size=tp_size,
        tp_rank=tp_rank,
    )


def make_header(
    executor: MemoryOpExecutor,
    window: int | None = None,
    geometry: dict | None = None,
    hicache: dict | None = None,
    source: dict | None = None,
) -> dict:
    """Everything a replay needs besides the records: pools, page size, geometry, HiCache."""
    s = executor.pages
    hicache = dict(hicache or dict(io_backend=None, layout=None, host_pages=None))
    if executor.host is not None:  # HiCache: (FULL, SWA) host pool pages
        hicache["host_pages"] = [pool.num_pages for pool in executor.host.pools]
    return dict(
        format=FORMAT,
        version=VERSION,
        page_size=s.page_size,
        full_pages=s.full.num_pages,
        swa_pages=s.swa.num_pages,
        need_sort=s.full.need_sort,
        window=window,
        geometry=geometry,
        hicache=hicache,
        kinds={k.name: int(k) for k in OpKind},
        source=source or {},
    )


def _csr(parts: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(parts) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(x) for x in parts])
    flat = np.concatenate(parts).astype(np.int64) if parts else np.empty(0, np.int64)
    return offsets, flat


def write_op_log(path: str | Path, header: dict, ops: list[MemoryOp], steps: list[StepInfo]) -> Path:
    """Write ``ops`` to ``path`` (npz): a temporary file in the same folder, then a rename."""
    path = Path(path)
    reasons: dict[str, int] = {}
    reason_ids = np.array([reasons.setdefault(op.reason, len(reasons)) for op in ops], dtype=np.int64)
    full_off, full = _csr([op.full for op in ops])
    swa_off, swa = _csr([op.swa for op in ops])
    src_off, src = _csr([op.src for op in ops])
    host_off, host = _csr([op.host for op in ops])
    _, page_steps = _csr(
        [op.page_steps if op.page_steps is not None else np.full(len(op.full), -1, np.int64) for op in ops]
    )
    header = dict(header, n_ops=len(ops), n_steps=len(steps))
    arrays = dict(
        header=np.array(json.dumps(header)),
        op_kind=np.array([int(op.kind) for op in ops], dtype=np.int8),
        op_step=np.array([op.step for op in ops], dtype=np.int64),
        op_reason=reason_ids,
        op_bound=np.array([op.bound for op in ops], dtype=np.int64),
        full_offsets=full_off,
        full_pages=full,
        swa_offsets=swa_off,
        swa_pages=swa,
        src_offsets=src_off,
        src_pages=src,
        host_offsets=host_off,
        host_pages=host,
        page_steps=page_steps,
        reasons=np.array(list(reasons), dtype=str) if reasons else np.empty(0, dtype="U1"),
        step_index=np.array([s.step for s in steps], dtype=np.int64),
        step_start_s=np.array([s.start_s for s in steps], dtype=np.float64),
        step_duration_s=np.array([s.duration_s for s in steps], dtype=np.float64),
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, umask_mode())  # mkstemp makes 0600; a log is shared like any output
        with os.fdopen(fd, "wb") as f:
            np.savez_compressed(f, **arrays)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_recording(path: str | Path, executor: MemoryOpExecutor, **header_fields) -> Path:
    """Write what ``executor`` recorded (``header_fields``: :func:`make_header`'s options)."""
    return write_op_log(path, make_header(executor, **header_fields), executor.ops, executor.steps)


def _fail(path: Path, field: str, why: str) -> OpLogError:
    return OpLogError(f"op log {path}: field {field!r}: {why}")


def _load_arrays(path: Path) -> tuple[dict, dict]:
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except FileNotFoundError:
        raise OpLogError(f"op log {path}: no such file") from None
    except (OSError, ValueError, EOFError) as exc:
        raise OpLogError(f"op log {path}: not an npz op log ({exc})") from None
    if "header" not in arrays:
        raise _fail(path, "header", "missing")
    try:
        header = json.loads(str(arrays.pop("header")))
    except json.JSONDecodeError as exc:
        raise _fail(path, "header", f"not JSON ({exc})") from None
    if not isinstance(header, dict):
        raise _fail(path, "header", f"must be a JSON object, got {type(header).__name__}")
    return header, arrays


def _validate(path: Path, header: dict, a: dict) -> None:
    for key in _HEADER_KEYS:
        if key not in header:
            raise _fail(path, f"header.{key}", "missing")
    if header["format"] != FORMAT:
        raise _fail(path, "header.format", f"{header['format']!r} is not {FORMAT!r}")
    if header["version"] not in READS:
        raise _fail(path, "header.version", f"version {header['version']} unsupported (reader: {READS})")
    if header["version"] == 1:  # no HiCache host ids yet
        a.setdefault("host_offsets", np.zeros(len(a.get("op_kind", ())) + 1, dtype=np.int64))
        a.setdefault("host_pages", np.empty(0, dtype=np.int64))
    for key in ("page_size", "full_pages", "swa_pages"):
        if not isinstance(header[key], int) or header[key] < 1:
            raise _fail(path, f"header.{key}", f"must be a positive integer, got {header[key]!r}")
    for name, kind in _ARRAYS.items():
        if name not in a:
            raise _fail(path, name, "missing")
        if a[name].ndim != 1 or a[name].dtype.kind not in (kind, "u" if kind == "i" else kind):
            raise _fail(path, name, f"must be a 1-d {kind} array, got {a[name].dtype} {a[name].shape}")
    n = len(a["op_kind"])
    for name in ("op_step", "op_reason", "op_bound"):
        if len(a[name]) != n:
            raise _fail(path, name, f"has {len(a[name])} entries for {n} records")
    for pre in ("full", "swa", "src", "host"):
        off, flat = a[f"{pre}_offsets"], a[f"{pre}_pages"]
        if len(off) != n + 1 or off[0] != 0 or off[-1] != len(flat) or (np.diff(off) < 0).any():
            raise _fail(path, f"{pre}_offsets", "not a valid offset array for its pages")
    if len(a["page_steps"]) != len(a["full_pages"]):
        raise _fail(path, "page_steps", "must have one entry per full page")
    bad = ~np.isin(a["op_kind"], [int(k) for k in OpKind])
    if bad.any():
        raise _fail(path, "op_kind", f"unknown kind {int(a['op_kind'][bad][0])}")
    if n and (a["op_reason"].min() < 0 or a["op_reason"].max() >= len(a["reasons"])):
        raise _fail(path, "op_reason", "index outside 'reasons'")
    for pre, limit in (
        ("full", header["full_pages"]),
        ("src", header["full_pages"]),
        ("swa", header["swa_pages"]),
    ):
        flat = a[f"{pre}_pages"]
        if len(flat) and (flat.min() < 1 or flat.max() > limit):
            raise _fail(path, f"{pre}_pages", f"page ids must lie in 1..{limit}")
    _validate_host(path, header, a)
    m = len(a["step_index"])
    for name in ("step_start_s", "step_duration_s"):
        if len(a[name]) != m:
            raise _fail(path, name, f"has {len(a[name])} entries for {m} steps")


def _validate_host(path: Path, header: dict, a: dict) -> None:
    """Host page ids: only HiCache records have them, within the header's host pools."""
    flat = a["host_pages"]
    if not len(flat):
        return
    pages = (header.get("hicache") or {}).get("host_pages")
    if not isinstance(pages, list) or len(pages) != 2:
        raise _fail(path, "header.hicache.host_pages", "HiCache records need [FULL, SWA] host pool pages")
    if flat.min() < 0 or flat.max() >= max(pages):
        raise _fail(path, "host_pages", f"host page ids must lie in 0..{max(pages) - 1}")


def read_op_log(path: str | Path) -> OpLog:
    """Read and validate an op log."""
    path = Path(path)
    header, a = _load_arrays(path)
    _validate(path, header, a)
    reasons = [str(x) for x in a["reasons"]]
    fo, so, ro, ho = a["full_offsets"], a["swa_offsets"], a["src_offsets"], a["host_offsets"]
    ops = []
    for i in range(len(a["op_kind"])):
        full = a["full_pages"][fo[i] : fo[i + 1]]
        ps = a["page_steps"][fo[i] : fo[i + 1]]
        kind = OpKind(int(a["op_kind"][i]))
        host = a["host_pages"][ho[i] : ho[i + 1]]
        ops.append(
            MemoryOp(
                kind,
                int(a["op_step"][i]),
                reasons[int(a["op_reason"][i])],
                full,
                a["swa_pages"][so[i] : so[i + 1]],
                a["src_pages"][ro[i] : ro[i + 1]],
                ps if len(ps) and ps[0] >= 0 else None,
                int(a["op_bound"][i]),
                len(host) if kind in HOST_ALLOCS else 0,
                host,
            )
        )
    steps = [
        StepInfo(int(s), float(t), float(d))
        for s, t, d in zip(a["step_index"], a["step_start_s"], a["step_duration_s"], strict=True)
    ]
    return OpLog(header, ops, steps)


@dataclass(frozen=True)
class PoolState:
    """The pools after one step's records: free counts and free page ids (list order)."""

    step: int
    full_free: int
    swa_free: int
    full_free_ids: np.ndarray
    swa_free_ids: np.ndarray

    @classmethod
    def of(cls, step: int, pages: SWAPageState) -> PoolState:
        full, swa = pages.free_counts()
        return cls(step, full, swa, pages.full.all_free().copy(), pages.swa.all_free().copy())


def fresh_executor(header: dict) -> MemoryOpExecutor:
    """An executor on fresh pools as the header sizes them (device, and host with HiCache)."""
    h = header
    pages = SWAPageState(h["full_pages"], h["swa_pages"], h["page_size"], h["need_sort"])
    host_pages = (h.get("hicache") or {}).get("host_pages")
    host = HostPageState(*host_pages) if host_pages else None
    return MemoryOpExecutor(pages, keep=False, host=host)


def replay_ops(log: OpLog) -> Iterator[PoolState]:
    """Apply the records on a fresh allocator; yield the pool state after each step's records
    (records are in step order; a step without records yields nothing)."""
    ex = fresh_executor(log.header)
    cur = None
    for op in log.ops:
        if cur is not None and op.step != cur:
            yield PoolState.of(cur, ex.pages)
        cur = op.step
        ex.apply(op)
    if cur is not None:
        yield PoolState.of(cur, ex.pages)


def replay_op_log(path: str | Path) -> Iterator[PoolState]:
    """``replay_ops(read_op_log(path))``: pool states per step, on a fresh allocator."""
    return replay_ops(read_op_log(path))
