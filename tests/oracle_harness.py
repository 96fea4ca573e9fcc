"""Client side of the SGLang oracle: locate the oracle, run workloads through it, compare.

The oracle (``../shared/oracle``, overridable by ``KVPLAN_ORACLE_DIR``) runs SGLang's own
cache classes on CPU.  It needs its own virtual environments (sglang + torch), built by
``.ci/setup_oracle.sh`` under ``${KVPLAN_ORACLE_CACHE:-~/.cache/kvplan-oracle}``: ``venv`` for
0.5.23 and ``venv015`` for 0.5.15.  kvplan's own venv never imports sglang; everything crosses
a process boundary through ``tests/oracle_worker.py`` speaking JSON lines.

Why a shared process per version: the sglang import costs seconds, a workload costs
milliseconds, and the driver builds fresh pools and a fresh tree for every workload from the
flags it is given.  So one :class:`OracleProcess` per (version, tree core) serves every
pool configuration; :class:`OracleWorker` binds one configuration (page size, pool sizes,
window) and sends it along with each workload.  ``tests/test_differential_oracle.py`` checks
that a shared process answers exactly as a fresh CLI run of the driver.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
WORKER_SCRIPT = Path(__file__).resolve().with_name("oracle_worker.py")

SIZE_KEYS = (
    "full_evictable",
    "full_protected",
    "swa_evictable",
    "swa_protected",
    "full_available",
    "swa_available",
)
"""The six sizes the oracle reports at every checkpoint (tree: 4, allocator: 2)."""

CHECKPOINTS = (
    "after_match",
    "after_prefill_alloc",
    "after_prefill_checkpoint",
    "before_release",
    "after_release",
)
"""Points of a request's life at which the oracle records the six sizes, in order."""


@dataclass(frozen=True)
class OracleVersion:
    """One SGLang version the oracle can run: which venv and which driver."""

    version: str
    venv_name: str
    driver: str
    tombstone: str
    swa_eviction: str


VERSIONS: dict[str, OracleVersion] = {
    "0.5.23": OracleVersion(
        "0.5.23", "venv", "drive_swa_radix", tombstone="unified", swa_eviction="interval"
    ),
    "0.5.15": OracleVersion(
        "0.5.15", "venv015", "drive_swa_radix_legacy", tombstone="legacy", swa_eviction="iteration"
    ),
}
"""The versions under test, with the kvplan policies that claim to reproduce each."""


SGLANG_EVICTION_POLICIES = ("lru", "lfu", "fifo", "mru", "filo", "priority", "slru", "tlru")
"""The FULL eviction orders SGLang 0.5.23's tree takes (mem_cache/utils.py
``_EVICTION_POLICY_FACTORIES``); ``test_sglang_eviction_policy_list_is_current`` asks the oracle."""


class OracleError(RuntimeError):
    """The oracle process failed (could not start, died, or timed out)."""


class OracleWorkloadError(RuntimeError):
    """The oracle rejected or failed one workload (e.g. ``Out of memory``); the process lives on."""

    def __init__(self, response: Mapping[str, Any]) -> None:
        self.response = dict(response)
        self.error_type = str(response.get("error_type"))
        super().__init__(f"{self.error_type}: {response.get('error')}\n{response.get('traceback', '')}")


def oracle_dir() -> Path:
    """The shared oracle folder: ``$KVPLAN_ORACLE_DIR`` or ``<repo>/../shared/oracle``."""
    env = os.environ.get("KVPLAN_ORACLE_DIR")
    return Path(env).resolve() if env else REPO_ROOT.parent / "shared" / "oracle"


def oracle_cache_dir() -> Path:
    """Where the oracle venvs live: ``$KVPLAN_ORACLE_CACHE`` or ``~/.cache/kvplan-oracle``."""
    env = os.environ.get("KVPLAN_ORACLE_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "kvplan-oracle"


def oracle_python(version: str) -> Path:
    """The interpreter of the venv that runs ``version``'s driver."""
    return oracle_cache_dir() / VERSIONS[version].venv_name / "bin" / "python"


def oracle_missing_reason(version: str) -> str | None:
    """Why ``version`` cannot run here, or ``None`` when it can."""
    if version not in VERSIONS:
        return f"unknown oracle version {version!r}; known: {sorted(VERSIONS)}"
    driver = oracle_dir() / f"{VERSIONS[version].driver}.py"
    if not driver.is_file():
        return f"oracle driver {driver} not found (set KVPLAN_ORACLE_DIR)"
    py = oracle_python(version)
    if not os.access(py, os.X_OK):
        return f"oracle venv for sglang {version} missing: {py} (run .ci/setup_oracle.sh)"
    return None


def oracle_available(version: str) -> bool:
    """Whether the driver and the venv for ``version`` are both present."""
    return oracle_missing_reason(version) is None


def normalize_requests(requests: Iterable[Any]) -> list[dict[str, Any]]:
    """Requests as the oracle's JSONL dicts.

    Accepts the ``replay_requests`` form ``(rid, input_ids, output_ids)`` (ids may be numpy
    arrays) and dicts with ``rid``/``input_ids``/``output_ids``/``session``.  Token ids become
    plain ``int`` so JSON and the driver's strict ``type(x) is int`` check accept them."""
    out = []
    for r in requests:
        if isinstance(r, Mapping):
            d = {
                "rid": str(r["rid"]),
                "input_ids": [int(x) for x in r["input_ids"]],
                "output_ids": [int(x) for x in r["output_ids"]],
            }
            if r.get("session") is not None:
                d["session"] = r["session"]
        else:
            rid, inp, outp = r[0], r[1], r[2]
            d = {"rid": str(rid), "input_ids": [int(x) for x in inp], "output_ids": [int(x) for x in outp]}
        out.append(d)
    return out


class OracleProcess:
    """One ``oracle_worker.py`` subprocess for one SGLang version.

    Any number of pool configurations may share it: each message carries its driver flags.
    Not thread-safe; one request in flight at a time."""

    def __init__(
        self,
        version: str,
        *,
        base_flags: Sequence[str] = ("--per-request",),
        start_timeout_s: float = 180.0,
        request_timeout_s: float = 300.0,
    ) -> None:
        reason = oracle_missing_reason(version)
        if reason:
            raise OracleError(reason)
        self.version = version
        self.base_flags = list(base_flags)
        self.start_timeout_s = start_timeout_s
        self.request_timeout_s = request_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.ready: dict[str, Any] = {}
        self.stats = {"starts": 0, "workloads": 0, "errors": 0, "busy_s": 0.0}
        self._buf = b""
        self._stderr_file: Any = None
        self._next_id = 0

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start the subprocess and wait for its ready line (the sglang import)."""
        if self.proc is not None and self.proc.poll() is None:
            return
        ver = VERSIONS[self.version]
        self._stderr_file = tempfile.TemporaryFile()
        cmd = [
            str(oracle_python(self.version)),
            str(WORKER_SCRIPT),
            "--oracle-dir",
            str(oracle_dir()),
            "--driver",
            ver.driver,
            "--",
            *self.base_flags,
        ]
        env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1")
        env.pop("PYTHONPATH", None)  # kvplan's paths must not leak into the oracle venv
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr_file, env=env, bufsize=0
        )
        self._buf = b""
        self.stats["starts"] += 1
        t0 = time.perf_counter()
        self.ready = self._read_json(self.start_timeout_s)
        self.ready["startup_s"] = round(time.perf_counter() - t0, 3)
        if not self.ready.get("ready"):
            raise OracleError(f"oracle {self.version}: unexpected first line {self.ready!r}")

    def close(self) -> None:
        """End the subprocess (EOF on its stdin, then kill if it lingers)."""
        if self.proc is None:
            return
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()
        if self._stderr_file is not None:
            self._stderr_file.close()
            self._stderr_file = None
        self.proc = None

    def __enter__(self) -> OracleProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ I/O
    def stderr_tail(self, n: int = 4000) -> str:
        """The last ``n`` characters the subprocess wrote to stderr (for error messages)."""
        if self._stderr_file is None:
            return ""
        self._stderr_file.seek(0, os.SEEK_END)
        size = self._stderr_file.tell()
        self._stderr_file.seek(max(0, size - n))
        return self._stderr_file.read().decode(errors="replace")

    def _read_json(self, timeout_s: float) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        fd = self.proc.stdout.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buf:
                left = deadline - time.monotonic()
                if left <= 0:
                    self.proc.kill()
                    raise OracleError(
                        f"oracle {self.version}: no answer within {timeout_s:.0f} s\n{self.stderr_tail()}"
                    )
                if not sel.select(left):
                    continue
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    rc = self.proc.wait()
                    self.proc = None
                    raise OracleError(f"oracle {self.version} exited with status {rc}\n{self.stderr_tail()}")
                self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return json.loads(line)

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send one message (see oracle_worker.py) and return the worker's answer as is."""
        self.start()
        assert self.proc is not None and self.proc.stdin is not None
        self._next_id += 1
        message = dict(message, id=self._next_id)
        t0 = time.perf_counter()
        try:
            self.proc.stdin.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
            self.proc.stdin.flush()
        except BrokenPipeError as e:
            raise OracleError(f"oracle {self.version} is gone\n{self.stderr_tail()}") from e
        response = self._read_json(self.request_timeout_s)
        self.stats["busy_s"] += time.perf_counter() - t0
        self.stats["workloads"] += 1
        if response.get("id") != message["id"]:
            raise OracleError(f"oracle {self.version}: answer id {response.get('id')} != {message['id']}")
        if not response.get("ok"):
            self.stats["errors"] += 1
        return response


@dataclass
class OracleWorker:
    """One SGLang version with one pool configuration, as a context manager.

    ``run(requests)`` returns the driver's per-workload JSON (with ``--per-request`` records)
    plus ``"oracle_heals"`` (see oracle_worker.py; ``None`` when not observable).  Pass
    ``process`` to share a subprocess with other configurations of the same version; without
    it the worker owns one and closes it on exit."""

    version: str
    page_size: int
    full_size: int
    swa_size: int
    window: int
    max_context_len: int | None = None
    max_reqs: int = 16
    tree_core: str = "rust"
    sanity_check: bool = False
    eviction_policy: str = "lru"
    eviction_policy_config: dict[str, Any] | None = None  # SGLang's --radix-eviction-policy-config
    process: OracleProcess | None = None
    _owns_process: bool = field(default=False, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.process is None:
            self.process = OracleProcess(self.version)
            self._owns_process = True
        elif self.process.version != self.version:
            raise ValueError(f"process runs {self.process.version}, worker wants {self.version}")
        if (self.eviction_policy != "lru" or self.eviction_policy_config) and self.version != "0.5.23":
            raise ValueError(
                f"sglang {self.version}'s driver has no --eviction-policy (its tree is LRU only)"
            )

    @property
    def driver_args(self) -> dict[str, Any]:
        """The driver flags (argparse dest names) this configuration sends with each workload."""
        policy = {"eviction_policy": self.eviction_policy} if self.version == "0.5.23" else {}
        return policy | {
            "page_size": self.page_size,
            "full_size": self.full_size,
            "swa_size": self.swa_size,
            "window": self.window,
            "max_context_len": self.max_context_len or max(4096, self.full_size),
            "max_reqs": self.max_reqs,
            "tree_core": self.tree_core,
            "sanity_check": self.sanity_check,
            "batch": 1,
            "per_request": True,
        }

    def __enter__(self) -> OracleWorker:
        assert self.process is not None
        self.process.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the subprocess if this worker owns it."""
        if self._owns_process and self.process is not None:
            self.process.close()

    def run_raw(self, requests: Iterable[Any]) -> dict[str, Any]:
        """The worker's raw answer for one workload (``ok`` false on a workload error)."""
        assert self.process is not None
        return self.process.request({"requests": normalize_requests(requests), **self._message_options()})

    def run(self, requests: Iterable[Any]) -> dict[str, Any]:
        """Serve one workload on a fresh cache; raise :class:`OracleWorkloadError` if it fails.

        The driver's JSON gains ``oracle_heals`` (healings seen, or ``None``), ``oracle_calls``
        (tree entry-point calls) and ``oracle_wall_s`` (the worker's time for the message)."""
        return self._unwrap(self.run_raw(requests))

    def run_file(self, path: Path | str) -> dict[str, Any]:
        """Like :meth:`run` for a JSONL file the worker reads itself (large workloads: no
        megabytes through the pipe)."""
        assert self.process is not None
        response = self.process.request({"workload": str(Path(path).resolve()), **self._message_options()})
        return self._unwrap(response)

    def _message_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"args": self.driver_args}
        if self.eviction_policy_config:
            options["eviction_policy_config"] = dict(self.eviction_policy_config)
        return options

    @staticmethod
    def _unwrap(response: dict[str, Any]) -> dict[str, Any]:
        if not response.get("ok"):
            raise OracleWorkloadError(response)
        result = response["result"]
        result["oracle_heals"] = response.get("heals")
        result["oracle_calls"] = response.get("calls")
        result["oracle_wall_s"] = response.get("wall_s")
        return result


# ---------------------------------------------------------------------- comparison
def compare_records(
    oracle_records: Sequence[Mapping[str, Any]],
    sim_records: Sequence[Mapping[str, Any]],
    *,
    checkpoints: Sequence[str] = CHECKPOINTS,
    max_diffs: int = 20,
) -> list[str]:
    """Differences between the oracle's and kvplan's per-request records, as readable lines.

    Compared: serving order (``rid``), ``prompt_len``, ``prefix_len`` and the six sizes at every
    checkpoint in ``checkpoints``.  A checkpoint present on one side only is a difference,
    except that a side may omit a checkpoint entirely for all requests (then it is skipped);
    ``after_release`` is always required.  Returns at most ``max_diffs`` lines (plus a count)."""
    diffs: list[str] = []
    if len(oracle_records) != len(sim_records):
        diffs.append(f"request count: oracle {len(oracle_records)} != kvplan {len(sim_records)}")
    sim_has = {cp for cp in checkpoints if any(cp in r for r in sim_records)}
    sim_has.add("after_release")
    for i, (o, s) in enumerate(zip(oracle_records, sim_records, strict=False)):  # count checked above
        rid = o.get("rid")
        if str(s.get("rid")) != str(rid):
            diffs.append(f"#{i}: rid oracle {rid!r} != kvplan {s.get('rid')!r} (serving order differs)")
            continue
        for key in ("prompt_len", "prefix_len"):
            if key in s and s[key] != o.get(key):
                diffs.append(f"{rid}: {key} oracle {o.get(key)} != kvplan {s[key]}")
        if "prefix_len" not in s:
            diffs.append(f"{rid}: kvplan record lacks prefix_len")
        for cp in checkpoints:
            if cp not in sim_has:
                continue
            oc, sc = o.get(cp), s.get(cp)
            if oc is None and sc is None:
                continue
            if oc is None or sc is None:
                diffs.append(f"{rid}.{cp}: present in {'kvplan' if oc is None else 'oracle'} only")
                continue
            bad = [f"{k} {oc.get(k)}!={sc.get(k)}" for k in SIZE_KEYS if oc.get(k) != sc.get(k)]
            if bad:
                diffs.append(f"{rid}.{cp} (oracle!=kvplan): " + ", ".join(bad))
    if len(diffs) > max_diffs:
        more = len(diffs) - max_diffs
        diffs = diffs[:max_diffs] + [f"... and {more} more"]
    return diffs


EXTRA_REQUEST_KEYS = (
    "evict_calls",
    "full_evicted",
    "swa_evicted",
    "cached_tokens",
    "cache_protected_len_after_checkpoint",
)
"""Per-request extras: tree evictions during the request, SGLang's ``Req.cached_tokens`` and
(0.5.23 only) ``req.kv.cache_protected_len`` after the prefill step."""

TREE_KEYS = ("nodes", "leaves", "tombstones", "tombstone_tokens", "full_tokens", "swa_tokens")
"""End-of-workload tree statistics both sides report."""


def compare_extras(oracle: Mapping[str, Any], result: Any, *, max_diffs: int = 20) -> list[str]:
    """Differences beyond the sizes: per-request eviction counts and ``cached_tokens``, the
    workload's eviction totals and the final tree's node/leaf/tombstone counts.

    These follow from the same decisions as the sizes, but node counts also depend on where
    splits happen, which the sizes cannot see.  Keys a side does not report are skipped."""
    diffs: list[str] = []
    for o, s in zip(oracle["requests"], getattr(result, "records", []), strict=False):
        bad = [f"{k} {o[k]}!={s[k]}" for k in EXTRA_REQUEST_KEYS if k in o and k in s and o[k] != s[k]]
        if bad:
            diffs.append(f"{o['rid']} (oracle!=kvplan): " + ", ".join(bad))
    ev = getattr(result, "evictions", None) or {}
    bad = [
        f"{k} {oracle['evictions'][k]}!={ev[k]}"
        for k in ("calls", "full_evicted", "swa_evicted")
        if k in ev and ev[k] != oracle["evictions"][k]
    ]
    if bad:
        diffs.append("eviction totals (oracle!=kvplan): " + ", ".join(bad))
    stats = getattr(result, "tree_stats", None) or {}
    bad = [
        f"{k} {oracle['tree'][k]}!={stats[k]}"
        for k in TREE_KEYS
        if k in stats and stats[k] != oracle["tree"][k]
    ]
    if bad:
        diffs.append("final tree (oracle!=kvplan): " + ", ".join(bad))
    if len(diffs) > max_diffs:
        diffs = diffs[:max_diffs] + [f"... and {len(diffs) - max_diffs} more"]
    return diffs


def oracle_command_line(version: str, workload: Path | str, worker: OracleWorker) -> str:
    """The shell command that reruns one workload through the driver by hand (for failures)."""
    a = worker.driver_args
    return (
        f"{oracle_python(version)} {oracle_dir() / (VERSIONS[version].driver + '.py')} "
        f"--workload {workload} --page-size {a['page_size']} --full-size {a['full_size']} "
        f"--swa-size {a['swa_size']} --window {a['window']} --max-context-len {a['max_context_len']} "
        f"--max-reqs {a['max_reqs']} --per-request"
        + (" --tree-core python" if a["tree_core"] == "python" and version == "0.5.23" else "")
        + (f" --eviction-policy {a['eviction_policy']}" if a.get("eviction_policy", "lru") != "lru" else "")
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Tiny CLI: ``python tests/oracle_harness.py VERSION PAGE FULL SWA WINDOW FILE.jsonl``
    prints the oracle's JSON for one workload through a worker (handy for debugging)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 6:
        print(main.__doc__, file=sys.stderr)
        return 2
    version, page, full, swa, window, path = args
    reqs = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    with OracleWorker(version, int(page), int(full), int(swa), int(window)) as w:
        print(json.dumps(w.run(reqs), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
