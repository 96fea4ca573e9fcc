"""Long-lived server around one SGLang oracle driver (run with an oracle venv's python).

Why this exists: importing sglang costs 6-13 s per process, while one small workload costs
0.1-0.2 s.  Hypothesis runs hundreds of workloads per configuration, so the differential
tests keep one process per SGLang version alive and feed it workloads over a pipe.

The worker imports the driver module from the oracle folder (``../shared/oracle`` by default)
and serves each workload with the driver's own ``run(args, specs, info, triton_from=...)`` --
the same function the driver's ``main`` calls once per ``--workload`` file -- so every workload
gets a fresh request pool, KV pool, allocator and tree, exactly as a CLI run of that file.

Protocol (JSON lines):

* start-up: the worker prints ``{"ready": true, "sglang_version": ..., "import_s": ...}``.
* request: ``{"id": ANY, "requests": [{"rid", "input_ids", "output_ids", "session"?}, ...]}``
  or ``{"id": ANY, "workload": "PATH.jsonl"}``; optional ``"args": {flag: value}`` overrides
  driver flags for this workload only (``page_size``, ``full_size``, ``swa_size``, ``window``,
  ``max_context_len``, ``max_reqs``, ``tree_core``, ``sanity_check``, ...).  Inline requests are
  written to a temporary JSONL file and read back with the driver's own reader, so they are
  validated exactly as the CLI validates them.  0.5.23 only: optional
  ``"eviction_policy_config": {kwarg: value}`` is passed to ``CacheInitParams`` (SGLang's
  ``--radix-eviction-policy-config``; the driver has no flag for it), e.g. TLRU's ``threshold``.
* answer: ``{"id", "ok": true, "result": <the driver's per-workload JSON>, "heals": N|null,
  "calls": {tree method: count}, "wall_s"}`` or ``{"id", "ok": false, "error_type", "error",
  "traceback"}``.  A workload that raises (e.g. the allocator's ``Out of memory``) yields an
  error answer; the worker keeps serving.
* EOF on stdin ends the worker.

``heals`` counts SWA tombstone healings observed through pass-through wrappers: in 0.5.15 the
transitions ``TreeNode.swa_tombstone`` True -> False; in 0.5.23 the calls of
``SWAComponent._recover_from_incoming`` (Python tree core only -- the Rust core does not call
back into Python, so ``heals`` is null for ``tree_core == "rust"``).  The wrappers never change
what the cache does.

The protocol channel is a private duplicate of the original stdout; file descriptor 1 is
pointed at stderr so that anything else printing to stdout (logging, the Rust core's
``println!`` outside the driver's own capture) cannot corrupt the JSON stream.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any


def _parse_worker_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """Split ``--driver NAME --oracle-dir DIR -- <driver flags>``."""
    if "--" in argv:
        cut = argv.index("--")
        own, driver_flags = argv[:cut], argv[cut + 1 :]
    else:
        own, driver_flags = argv, []
    p = argparse.ArgumentParser(prog="oracle_worker.py")
    p.add_argument("--oracle-dir", required=True, help="folder holding the driver modules")
    p.add_argument(
        "--driver",
        required=True,
        choices=["drive_swa_radix", "drive_swa_radix_legacy", "drive_hicache"],
        help="driver module to import (0.5.23 or 0.5.15; drive_hicache: 0.5.23 with HiCache)",
    )
    return p.parse_args(own), driver_flags


class _HealCounter:
    """Pass-through instrumentation that counts SWA tombstone healings."""

    def __init__(self) -> None:
        self.count = 0
        self.supported_for_rust = False

    def install(self, driver_name: str) -> None:
        if driver_name == "drive_swa_radix_legacy":
            self._install_legacy()
        else:
            self._install_unified()

    def _install_legacy(self) -> None:
        # 0.5.15 flips TreeNode.swa_tombstone from True to False exactly where it heals a
        # tombstone (the three branches of _insert_helper and
        # _recover_tombstone_keeping_locked_full).  A data descriptor observes the flips.
        from sglang.srt.mem_cache import swa_radix_cache as mod

        counter = self

        def get(node: Any) -> bool:
            return node.__dict__["_kvplan_swa_tombstone"]

        def set_(node: Any, value: bool) -> None:
            if value is False and node.__dict__.get("_kvplan_swa_tombstone") is True:
                counter.count += 1
            node.__dict__["_kvplan_swa_tombstone"] = value

        mod.TreeNode.swa_tombstone = property(get, set_)

    def _install_unified(self) -> None:
        # 0.5.23 (Python tree core): every tombstoned fragment that an insert re-populates with
        # the request's fresh SWA KV goes through SWAComponent._recover_from_incoming.
        from sglang.srt.mem_cache.unified_cache.components import swa as mod

        counter = self
        real = mod.SWAComponent._recover_from_incoming

        def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
            counter.count += 1
            return real(self, *args, **kwargs)

        mod.SWAComponent._recover_from_incoming = counting


class _CallCounter:
    """Pass-through counts of the tree entry points the scheduler calls (per workload).

    Why: the speed benchmark reports tree operations per second for SGLang and kvplan alike;
    these are SGLang's own calls, counted where they happen."""

    METHODS = {
        "drive_swa_radix": (
            "sglang.srt.mem_cache.unified_radix_cache",
            "UnifiedRadixCache",
            ("match_prefix", "insert", "lock", "unlock", "evict_for_alloc"),
        ),
        "drive_hicache": (
            "sglang.srt.mem_cache.unified_radix_cache",
            "UnifiedRadixCache",
            ("match_prefix", "insert", "lock", "unlock", "evict_for_alloc", "load_back"),
        ),
        "drive_swa_radix_legacy": (
            "sglang.srt.mem_cache.swa_radix_cache",
            "SWARadixCache",
            ("match_prefix", "insert", "inc_lock_ref", "dec_lock_ref", "evict"),
        ),
    }

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def install(self, driver_name: str) -> None:
        module_name, class_name, methods = self.METHODS[driver_name]
        cls = getattr(importlib.import_module(module_name), class_name)
        for name in methods:
            self.counts[name] = 0
            setattr(cls, name, self._wrap(name, getattr(cls, name)))

    def _wrap(self, name: str, real: Any) -> Any:
        counts = self.counts

        def counting(*args: Any, **kwargs: Any) -> Any:
            counts[name] += 1
            return real(*args, **kwargs)

        counting.__name__ = getattr(real, "__name__", name)
        counting.__doc__ = getattr(real, "__doc__", None)
        return counting

    def reset(self) -> None:
        for name in self.counts:
            self.counts[name] = 0


def main(argv: list[str]) -> int:
    """Serve workloads from stdin until EOF; see the module docstring for the protocol."""
    own, driver_flags = _parse_worker_args(argv)
    proto = os.fdopen(os.dup(1), "w", buffering=1)  # private protocol channel
    os.dup2(2, 1)  # stray stdout writes now land on stderr

    oracle_dir = str(Path(own.oracle_dir).resolve())
    sys.path.insert(0, oracle_dir)
    t0 = time.perf_counter()
    driver = importlib.import_module(own.driver)  # imports sgl_stubs, torch and sglang
    import_s = time.perf_counter() - t0
    import sgl_stubs  # already imported by the driver; holds TRITON_LAUNCH_ATTEMPTS
    import workload as wl  # the driver's own reader and CLI parser

    heals = _HealCounter()
    heals.install(own.driver)
    calls = _CallCounter()
    calls.install(own.driver)
    # drive_hicache adds its HiCache flags to the shared workload / pool flags
    base_args = (driver.parse_args if own.driver == "drive_hicache" else wl.parse_args)(driver_flags)
    base_args.workload = None
    init_params = getattr(driver, "CacheInitParams", None)

    def answer(obj: dict[str, Any]) -> None:
        proto.write(json.dumps(obj, separators=(",", ":")) + "\n")
        proto.flush()

    answer(
        dict(
            ready=True,
            driver=own.driver,
            sglang_version=importlib.import_module("sglang").__version__,
            import_s=round(import_s, 3),
            pid=os.getpid(),
        )
    )

    with tempfile.TemporaryDirectory(prefix="kvplan-oracle-") as tmp:
        for line in sys.stdin:
            if not line.strip():
                continue
            t_msg = time.perf_counter()
            msg_id: Any = None
            heals.count = 0
            calls.reset()
            try:
                msg = json.loads(line)
                msg_id = msg.get("id")
                args = argparse.Namespace(**vars(base_args))
                for key, value in (msg.get("args") or {}).items():
                    if not hasattr(args, key) or key == "workload":
                        raise ValueError(f"unknown driver flag {key!r} in 'args'")
                    setattr(args, key, value)
                if "workload" in msg:
                    path = str(msg["workload"])
                else:
                    path = os.path.join(tmp, "workload.jsonl")
                    with open(path, "w") as f:
                        for req in msg["requests"]:
                            f.write(json.dumps(req) + "\n")
                args.workload = path
                policy_config = msg.get("eviction_policy_config")
                if policy_config and init_params is None:
                    raise ValueError(f"{own.driver} takes no eviction_policy_config")
                if init_params is not None:  # the driver builds its params through this name
                    driver.CacheInitParams = (
                        functools.partial(init_params, eviction_policy_config=policy_config)
                        if policy_config
                        else init_params
                    )
                specs, info = wl.load_requests(args)  # validates like the CLI
                mark = len(sgl_stubs.TRITON_LAUNCH_ATTEMPTS)
                result = driver.run(args, specs, info, triton_from=mark)
                tree_core = getattr(args, "tree_core", "rust")
                heal_count = (
                    heals.count if own.driver == "drive_swa_radix_legacy" or tree_core == "python" else None
                )
                answer(
                    dict(
                        id=msg_id,
                        ok=True,
                        result=result,
                        heals=heal_count,
                        calls=dict(calls.counts),
                        wall_s=round(time.perf_counter() - t_msg, 4),
                    )
                )
            except Exception as e:  # noqa: BLE001 -- one bad workload must not end the worker
                answer(
                    dict(
                        id=msg_id,
                        ok=False,
                        error_type=type(e).__name__,
                        error=str(e),
                        traceback=traceback.format_exc(),
                        triton_launch_attempts=list(sgl_stubs.TRITON_LAUNCH_ATTEMPTS),
                        wall_s=round(time.perf_counter() - t_msg, 4),
                    )
                )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
