"""Setup and timing helpers of :mod:`gpu_replay.scatter_bench`: pools per host allocation kind,
CUDA-event and gated timing, the environment record, and the movers the parts compare."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import time
from pathlib import Path

import torch

from gpu_replay.geometry import GIB, cap_rank, rank_geometry
from gpu_replay.host_alloc import huge_fraction
from gpu_replay.pools import build_device_pool, build_host_pool
from gpu_replay.transfer_cuda import CudaConfig, CudaRowsTransfer, CxxCopyTransfer
from gpu_replay.transfer_split import SplitTransfer

PREFIXES = (1024, 2048, 4096, 8192, 16384, 32768)


def _time(fn, reps: int, warmup: int = 2) -> list[float]:
    """Seconds per call by CUDA events (host issue time counts where the GPU waits for it)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        out.append(s.elapsed_time(e) / 1e3)
    return out


def _gated(fn, reps: int, gate_s: float, lib) -> tuple[list[float], list[float]]:
    """Execution seconds of ``fn``'s GPU work queued behind a sleeping kernel, and the host's
    issue seconds (which must stay under the gate for the number to mean execution alone)."""
    fn()
    torch.cuda.synchronize()
    exe, issue = [], []
    for _ in range(reps):
        cur = torch.cuda.current_stream()
        lib.kvt_sleep(int(gate_s * 1e9), cur.cuda_stream)
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        t0 = time.perf_counter()
        fn()
        issue.append(time.perf_counter() - t0)
        e.record()
        e.synchronize()
        exe.append(s.elapsed_time(e) / 1e3)
    return exe, issue


TMA_SHAPES = {  # bulk-async (TMA 1D) ring: blocks per SM, bytes per bulk op, ring stages
    "tma[1x32k4]": CudaConfig(blocks_per_sm=1, chunk=32 << 10, stages=4),
    "tma[1x32k6]": CudaConfig(blocks_per_sm=1, chunk=32 << 10, stages=6),
    "tma[1x16k8]": CudaConfig(blocks_per_sm=1, chunk=16 << 10, stages=8),
    "tma[2x16k4]": CudaConfig(blocks_per_sm=2, chunk=16 << 10, stages=4),
    "tma[2x8k8]": CudaConfig(blocks_per_sm=2, chunk=8 << 10, stages=8),
    "tma[4x8k4]": CudaConfig(blocks_per_sm=4, chunk=8 << 10, stages=4),
}


def _gbps(nbytes: int, secs: list[float]) -> dict:
    med, best = statistics.median(secs), min(secs)
    return {
        "bytes": nbytes,
        "median_s": med,
        "best_s": best,
        "gbps": nbytes / med / 1e9,
        "gbps_best": nbytes / best / 1e9,
    }


def _sh(cmd: str) -> str:
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return f"error: {exc}"


def environment() -> dict:
    def read(p: str) -> str:
        try:
            return Path(p).read_text().strip()
        except OSError:
            return ""

    return {
        "gpu": torch.cuda.get_device_name(0),
        "nvidia_smi": _sh(
            "nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.max,pcie.link.width.max --format=csv"
        ),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "kernel": platform.release(),
        "thp_enabled": read("/sys/kernel/mm/transparent_hugepage/enabled"),
        "thp_defrag": read("/sys/kernel/mm/transparent_hugepage/defrag"),
        "nr_hugepages": read("/proc/sys/vm/nr_hugepages"),
        "meminfo": {
            ln.split(":")[0]: ln.split(":")[1].strip()
            for ln in read("/proc/meminfo").splitlines()[:60]
            if ":" in ln
        },
        "cpus": os.cpu_count(),
    }


def reserve_hugepages(gib: float) -> dict:
    """Grow the 2 MiB page pool by ``gib`` (root only); report what the kernel granted."""
    path = Path("/proc/sys/vm/nr_hugepages")
    before = int(path.read_text())
    want = before + int(gib * 512)
    try:
        path.write_text(str(want))
    except OSError as exc:
        return {"before": before, "asked": want, "error": str(exc)}
    return {"before": before, "asked": want, "granted": int(path.read_text())}


class Setup:
    """Device pool and one layer_first host pool per allocation kind, filled with random bits."""

    def __init__(self, args) -> None:
        rank = cap_rank(
            rank_geometry("gpt-oss-120b", 2, page_size=64, gpu="H100"),
            device_cap_bytes=int(args.device_cap_gib * GIB),
            host_cap_bytes=int(args.host_cap_gib * GIB),
        )
        self.geo = rank.pool("full")
        self.dev = build_device_pool(self.geo, "cuda")
        for t in (*self.dev.k, *self.dev.v):
            t.view(torch.int16).random_(-(1 << 14), 1 << 14)
        self.hosts, self.alloc_info = {}, {}
        block = torch.randint(-(1 << 14), 1 << 14, (1 << 24,), dtype=torch.int16)
        for kind in args.allocs.split(","):
            t0 = time.perf_counter()
            try:
                host = build_host_pool(self.geo, "layer_first", pin=True, alloc=kind)
            except (OSError, RuntimeError, ValueError) as exc:
                self.alloc_info[kind] = {"error": f"{type(exc).__name__}: {exc}"}
                print("alloc", kind, "failed:", exc, flush=True)
                continue
            alloc_s = time.perf_counter() - t0
            for t in (host.k, host.v):
                flat = t.view(-1).view(torch.int16)
                for off in range(0, flat.numel(), block.numel()):
                    n = min(block.numel(), flat.numel() - off)
                    flat[off : off + n].copy_(block[:n])
            self.hosts[kind] = host
            self.alloc_info[kind] = {
                "used": host.alloc,
                "bytes": host.k.numel() * 2 + host.v.numel() * 2,
                "alloc_register_s": alloc_s,
                "huge_fraction_k": huge_fraction(host.k.data_ptr()),
                "huge_fraction_v": huge_fraction(host.v.data_ptr()),
            }
            print("alloc", kind, self.alloc_info[kind], flush=True)
        self.gen = torch.Generator().manual_seed(0)

    def indices(self, n_pages: int, device: bool):
        g = self.geo
        hp = torch.randperm(g.host_pages - 1, generator=self.gen)[:n_pages] + 1
        dp = torch.randperm(g.device_pages - 1, generator=self.gen)[:n_pages] + 1
        ar = torch.arange(g.page_size)
        hi, di = (hp[:, None] * g.page_size + ar).flatten(), (dp[:, None] * g.page_size + ar).flatten()
        return (hi.cuda(), di.cuda()) if device else (hi, di)


def _ce(s: Setup, kind: str, streams: int, sort: bool, max_batch: int = 0) -> CxxCopyTransfer:
    return CxxCopyTransfer(
        s.hosts[kind], s.dev, "batch", streams=streams, max_batch=max_batch, side=True, sort=sort
    )


def _split(s: Setup, kind: str, frac: float, streams: int = 4, max_batch: int = 128) -> SplitTransfer:
    return SplitTransfer(s.hosts[kind], s.dev, frac, streams=streams, max_batch=max_batch)


def _sm(s: Setup, kind: str, cfg: CudaConfig) -> CudaRowsTransfer:
    return CudaRowsTransfer(s.hosts[kind], s.dev, cfg)


SM_SHAPES = {
    "sm[2x256u8]": CudaConfig(),
    "sm[4x256u8]": CudaConfig(blocks_per_sm=4),
    "sm[1x512u16]": CudaConfig(blocks_per_sm=1, block=512, unroll=16),
    "sm[8x128u4]": CudaConfig(blocks_per_sm=8, block=128, unroll=4),
}


PDL_SHAPES = {  # per-layer loads with programmatic dependent launch; small rings let kernels co-reside
    "tma[1x32k4]": CudaConfig(blocks_per_sm=1, chunk=32 << 10, stages=4),
    "tma[1x32k4]pdl": CudaConfig(blocks_per_sm=1, chunk=32 << 10, stages=4, pdl=True),
    "tma[1x32k2]pdl": CudaConfig(blocks_per_sm=1, chunk=32 << 10, stages=2, pdl=True),
    "tma[1x16k2]pdl": CudaConfig(blocks_per_sm=1, chunk=16 << 10, stages=2, pdl=True),
    "tma[2x16k2]pdl": CudaConfig(blocks_per_sm=2, chunk=16 << 10, stages=2, pdl=True),
    "sm[2x256u8]": CudaConfig(),
    "sm[2x256u8]pdl": CudaConfig(pdl=True),
}


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise (the random bits hold NaNs, which == would call unequal)."""
    return torch.equal(a.cpu().view(torch.int16), b.cpu().view(torch.int16))
