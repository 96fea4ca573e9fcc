"""SM partitions by CUDA green contexts: a stream limited to ``k`` SMs for per-layer loads and a
stream on the other SMs for the attention stand-in (issue 13, seventh session).

Two ways in, tried in this order by :func:`make_partition`:

- ``driver``: the CUDA driver API through ctypes on ``libcuda`` (no nvcc): one split of the
  device's SMs (``cuDevSmResourceSplitByCount``, one group of ``k``, the rest left over), a green
  context per side, a non-blocking stream in each (``cuGreenCtxStreamCreate``), wrapped for torch as
  external streams. SGLang's sgl-kernel does the same for its PD multiplexing
  (``sgl-kernel/csrc/spatial/greenctx_stream.cu``, ``create_greenctx_stream_by_value``); the two
  sides are disjoint by construction.
- ``torch``: ``torch.cuda.green_contexts.GreenContext.create(num_sms=...)`` and its ``Stream()``
  (torch >= 2.10 where built with green contexts). Each call splits the whole device on its own,
  so the two contexts may share SMs; recorded as ``disjoint: False``.

Only the SM counts the driver granted are used downstream (Hopper rounds groups up to its
partition granularity, so ``k=4`` may come back as 8).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

import torch

__all__ = ["Partition", "make_partition", "sm_count_of", "torch_support"]

CU_DEV_RESOURCE_TYPE_SM = 1
CU_GREEN_CTX_DEFAULT_STREAM = 0x1
CU_STREAM_NON_BLOCKING = 0x1
# CUdevResource (cuda.h, ABI version 1): int type, 92 bytes of padding, then the union whose SM
# member starts with ``unsigned int smCount``. Buffers are over-allocated: later ABIs append fields.
_SM_COUNT_OFFSET = 96
_RESOURCE_BYTES = 512


def sm_count_of(resource: bytes | bytearray | ctypes.Array) -> int:
    """``smCount`` of a CUdevResource buffer of type SM."""
    raw = bytes(resource)
    return int.from_bytes(raw[_SM_COUNT_OFFSET : _SM_COUNT_OFFSET + 4], "little")


def torch_support() -> dict:
    """What this torch offers for green contexts (recorded in every run)."""
    out: dict = {"torch": torch.__version__, "cuda": torch.version.cuda}
    try:
        import torch.cuda.green_contexts as gc
    except ImportError as exc:
        return out | {"module": False, "error": str(exc)}
    out |= {
        "module": True,
        "SUPPORTED": bool(getattr(gc, "SUPPORTED", False)),
        "has_Stream": hasattr(getattr(gc, "GreenContext", object), "Stream"),
        "has_set_context": hasattr(getattr(gc, "GreenContext", object), "set_context"),
    }
    return out


@dataclass
class Partition:
    """A load stream on ``load_sms`` SMs and a compute stream on ``compute_sms`` SMs."""

    backend: str
    asked_k: int
    load_sms: int
    compute_sms: int
    total_sms: int
    disjoint: bool
    load_stream: torch.cuda.Stream
    compute_stream: torch.cuda.Stream
    raw_counts: dict = field(default_factory=dict)
    _keep: list = field(default_factory=list, repr=False)
    _close: object = field(default=None, repr=False)

    def record(self) -> dict:
        return {
            "backend": self.backend,
            "asked_k": self.asked_k,
            "load_sms": self.load_sms,
            "compute_sms": self.compute_sms,
            "total_sms": self.total_sms,
            "disjoint": self.disjoint,
            "raw_counts": self.raw_counts,
        }

    def close(self) -> None:
        torch.cuda.synchronize()
        if callable(self._close):
            self._close()
        self._close = None


class _Driver:
    """The few libcuda entry points of the green-context API (CUDA >= 12.4 drivers)."""

    def __init__(self) -> None:
        self.lib = ctypes.CDLL("libcuda.so.1")
        P, U, I = ctypes.c_void_p, ctypes.c_uint, ctypes.c_int  # noqa: E741, N806
        sig = {
            "cuDeviceGet": [ctypes.POINTER(I), I],
            "cuDeviceGetDevResource": [I, P, I],
            "cuDevSmResourceSplitByCount": [P, ctypes.POINTER(U), P, P, U, U],
            "cuDevResourceGenerateDesc": [ctypes.POINTER(P), P, U],
            "cuGreenCtxCreate": [ctypes.POINTER(P), P, I, U],
            "cuGreenCtxGetDevResource": [P, P, I],
            "cuGreenCtxStreamCreate": [ctypes.POINTER(P), P, U, I],
            "cuGreenCtxDestroy": [P],
            "cuStreamDestroy_v2": [P],
        }
        for name, args in sig.items():
            fn = getattr(self.lib, name)
            fn.argtypes, fn.restype = args, I

    def call(self, name: str, *args) -> None:
        rc = getattr(self.lib, name)(*args)
        if rc != 0:
            raise RuntimeError(f"{name} failed with CUresult {rc}")

    def green(self, resource, dev: int) -> tuple[ctypes.c_void_p, ctypes.c_void_p, int]:
        """A green context over ``resource``, its stream, and the SMs it reports."""
        desc, ctx, stream = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
        self.call("cuDevResourceGenerateDesc", ctypes.byref(desc), resource, 1)
        self.call("cuGreenCtxCreate", ctypes.byref(ctx), desc, dev, CU_GREEN_CTX_DEFAULT_STREAM)
        self.call("cuGreenCtxStreamCreate", ctypes.byref(stream), ctx, CU_STREAM_NON_BLOCKING, 0)
        got = ctypes.create_string_buffer(_RESOURCE_BYTES)
        self.call("cuGreenCtxGetDevResource", ctx, got, CU_DEV_RESOURCE_TYPE_SM)
        return ctx, stream, sm_count_of(got)


def _driver_partition(k: int, device: int) -> Partition:
    drv = _Driver()
    torch.cuda.init()
    dev = ctypes.c_int()
    drv.call("cuDeviceGet", ctypes.byref(dev), device)
    whole = ctypes.create_string_buffer(_RESOURCE_BYTES)
    drv.call("cuDeviceGetDevResource", dev, whole, CU_DEV_RESOURCE_TYPE_SM)
    group, rest = ctypes.create_string_buffer(_RESOURCE_BYTES), ctypes.create_string_buffer(_RESOURCE_BYTES)
    n = ctypes.c_uint(1)
    drv.call("cuDevSmResourceSplitByCount", group, ctypes.byref(n), whole, rest, 0, k)
    if n.value != 1:
        raise RuntimeError(f"split of {k} SMs gave {n.value} groups")
    lctx, lstream, lsms = drv.green(group, dev)
    cctx, cstream, csms = drv.green(rest, dev)

    def close():
        for s in (lstream, cstream):
            drv.call("cuStreamDestroy_v2", s)
        for c in (lctx, cctx):
            drv.call("cuGreenCtxDestroy", c)

    total = torch.cuda.get_device_properties(device).multi_processor_count
    load = _plausible(total, lsms, sm_count_of(group), k)
    raw = {"green_load": lsms, "green_compute": csms, "split_group": sm_count_of(group)}
    raw |= {"split_rest": sm_count_of(rest), "device": sm_count_of(whole)}
    return Partition(
        backend="driver",
        asked_k=k,
        load_sms=load,
        compute_sms=_plausible(total, csms, sm_count_of(rest), total - load),
        total_sms=total,
        disjoint=True,
        load_stream=torch.cuda.ExternalStream(lstream.value, device=device),
        compute_stream=torch.cuda.ExternalStream(cstream.value, device=device),
        raw_counts=raw,
        _keep=[drv, group, rest, whole],
        _close=close,
    )


def _plausible(total: int, *counts: int) -> int:
    """The first count within the device (a count read at a wrong struct offset would not be)."""
    return next(n for n in counts if 0 < n <= total)


def _torch_partition(k: int, device: int) -> Partition:
    from torch.cuda.green_contexts import GreenContext

    total = torch.cuda.get_device_properties(device).multi_processor_count
    load = GreenContext.create(num_sms=k, device_id=device)
    comp = GreenContext.create(num_sms=total - k, device_id=device)
    return Partition(
        backend="torch",
        asked_k=k,
        load_sms=k,
        compute_sms=total - k,
        total_sms=total,
        disjoint=False,
        load_stream=load.Stream(),
        compute_stream=comp.Stream(),
        _keep=[load, comp],
    )


def make_partition(k: int, device: int = 0, backends: tuple[str, ...] = ("driver", "torch")) -> tuple:
    """(partition or None, {backend: error}) for the first backend that works."""
    errors: dict[str, str] = {}
    makers = {"driver": _driver_partition, "torch": _torch_partition}
    for b in backends:
        try:
            return makers[b](k, device), errors
        except Exception as exc:  # any refusal (no driver, no support, no CUDA) is recorded
            errors[b] = f"{type(exc).__name__}: {exc}"
    return None, errors


def probe(ks: tuple[int, ...], backends: tuple[str, ...] = ("driver", "torch")) -> dict:
    """Support record, then per k and backend: a partition made, a kernel and an event on each of
    its streams, closed (what the driver grants; a refusal is recorded, not raised)."""
    out: dict = {"support": torch_support(), "partitions": []}
    if not torch.cuda.is_available():
        return out | {"cuda": False}
    x = torch.zeros(1 << 20, device="cuda")
    for k in ks:
        for b in backends:
            part, errors = make_partition(k, 0, (b,))
            row: dict = {"k": k, "backend": b, "errors": errors}
            if part is not None:
                row |= part.record()
                try:
                    for st in (part.load_stream, part.compute_stream):
                        st.wait_stream(torch.cuda.current_stream())
                        with torch.cuda.stream(st):
                            x.add_(1)
                        torch.cuda.current_stream().wait_stream(st)
                    torch.cuda.synchronize()
                    row["kernels"] = "ok" if float(x[0]) == 2.0 else f"wrong value {float(x[0])}"
                except RuntimeError as exc:
                    row["kernels"] = f"{type(exc).__name__}: {exc}"
                x.zero_()
                part.close()
            out["partitions"].append(row)
            print("probe", row, flush=True)
    return out


def main(argv=None) -> None:
    import argparse
    import json

    ap = argparse.ArgumentParser(description="green-context support and partitions on this GPU")
    ap.add_argument("--out", default="green_probe.json")
    ap.add_argument("--ks", default="4,8,16,24,32")
    args = ap.parse_args(argv)
    res = probe(tuple(int(k) for k in args.ks.split(",")))
    print("support", res["support"], flush=True)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1, default=str)


if __name__ == "__main__":
    main()
