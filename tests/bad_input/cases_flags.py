"""Bad flag values for every command: each case is an argv and the substring its one-line error
must contain (the flag's name, or the refused thing), and the exit status (2: click's usage error
for a value of the wrong type or an unknown option; 1: kvplan's own refusal; 3: a run whose requests
were rejected or aborted; 0: a valid value, and ``error`` is then a substring of the report).

Placeholders, filled in by the corpus test: ``{trace}`` a small valid trace of the corpus,
``{cases}`` the corpus directory, ``{tmp}`` a fresh temporary directory. ``setup`` lists what
the case needs there first.
"""

from __future__ import annotations

from typing import Any

TRACE = "{trace}"
TOKEN_LIKE = [("0", 1), ("-1", 1), ("abc", 2), ("1.5", 2), ("", 2), ("nan", 2), (str(2**31), 1)]
COUNT = [("0", 1), ("-1", 1), ("abc", 2), ("1.5", 2), ("nan", 2), ("1e3", 2)]
NON_NEG = [("-1", 1), ("nan", 1), ("inf", 1), ("-inf", 1), ("abc", 2), ("1e400", 1)]
POSITIVE = [("0", 1), ("-0.5", 1), ("nan", 1), ("inf", 1), ("-inf", 1), ("abc", 2)]
FRACTION = [("0", 1), ("1.5", 1), ("-0.1", 1), ("nan", 1), ("inf", 1), ("x", 2)]
RATE = [("0", 1), ("-1", 1), ("nan", 1), ("-inf", 1), ("fast", 2)]
SEED = [("-1", 1), (str(2**32), 1), ("abc", 2), ("1.5", 2)]

# Server flags shared by run, bench-multiturn and demo (pools: the sizing subset).
SERVER_NUMERIC: list[tuple[str, list[tuple[str, int]]]] = [
    (
        "--tp",
        [("0", 1), ("-8", 1), ("3", 1), ("5", 1), ("6", 1), ("7", 1), ("12", 1), ("2048", 1), ("two", 2)],
    ),
    ("--page-size", TOKEN_LIKE),
    ("--swa-full-tokens-ratio", FRACTION),
    ("--mem-fraction-static", FRACTION),
    ("--max-total-tokens", TOKEN_LIKE),
    ("--max-running-requests", COUNT),
    ("--chunked-prefill-size", [("-2", 1), ("abc", 2), (str(2**31), 1), ("1.5", 2)]),
    ("--max-prefill-tokens", TOKEN_LIKE),
    ("--kv-budget-gib", POSITIVE),
    ("--schedule-conservativeness", NON_NEG),
    ("--swa-eviction-interval", COUNT),
]
POOL_NUMERIC = {
    "--tp",
    "--page-size",
    "--swa-full-tokens-ratio",
    "--mem-fraction-static",
    "--max-total-tokens",
    "--max-running-requests",
    "--kv-budget-gib",
}
CHOICES = [
    "--gpu",
    "--schedule-policy",
    "--radix-eviction-policy",
    "--swa-eviction",
    "--tombstone",
]
UNMODELLED = [
    ("--speculative-algorithm", ["EAGLE"]),
    ("--enable-dp-attention", []),
    ("--dp-size", ["2"]),
    ("--pp-size", ["2"]),
    ("--ep-size", ["8"]),
    ("--nnodes", ["2"]),
    ("--enable-mixed-chunk", []),
    ("--enable-two-batch-overlap", []),
    ("--enable-lora", []),
    ("--lora-paths", ["adapter"]),
    ("--disaggregation-mode", ["prefill"]),
    ("--kv-cache-dtype", ["fp8_e5m2"]),
    ("--attention-backend", ["fa3"]),
]
# `pools` models these itself (it sizes HiCache and other KV dtypes), so they are not refused there.
POOLS_MODELS = {"--enable-hierarchical-cache", "--kv-cache-dtype", "--attention-backend"}


def _case(
    argv: list[str], error: str, exit_code: int, setup: list[list[str]] | None = None
) -> dict[str, Any]:
    case: dict[str, Any] = {"argv": argv, "error": error, "exit": exit_code}
    if setup:
        case["setup"] = setup
    return case


def _base(command: str) -> list[str]:
    """The command line a flag is appended to (small inputs, so a check made too late still ends fast)."""
    return {
        "run": ["run", "--trace", TRACE],
        "bench-multiturn": ["bench-multiturn", "--num-clients", "2", "--num-rounds", "2"],
        "demo": ["demo", "--trace", TRACE],
        "pools": ["pools"],
        "cache-replay": ["cache-replay", TRACE],
        "trace stats": ["trace", "stats", TRACE],
        "trace head": ["trace", "head", TRACE],
        "trace convert": ["trace", "convert", TRACE, "-o", "{tmp}/out.parquet"],
    }[command]


def _numeric(command: str, flag: str, values: list[tuple[str, int]]) -> list[dict]:
    return [_case([*_base(command), flag, v], flag, code) for v, code in values]


def server_flag_cases() -> list[dict]:
    cases = []
    for command in ("run", "bench-multiturn", "demo", "pools"):
        for flag, values in SERVER_NUMERIC:
            if command == "pools" and flag not in POOL_NUMERIC:
                continue
            if command in ("bench-multiturn", "demo") and flag not in (
                "--tp",
                "--page-size",
                "--kv-budget-gib",
                "--max-running-requests",
            ):
                continue
            cases += _numeric(command, flag, values)
        for flag in CHOICES if command != "pools" else ["--gpu"]:
            cases.append(_case([*_base(command), flag, "bogus"], flag, 2))
        cases.append(_case([*_base(command), "--model", "no-such-model"], "no-such-model", 1))
        cases.append(
            _case([*_base(command), "--model", "/nonexistent/config.json"], "/nonexistent/config.json", 1)
        )
        for flag, value in UNMODELLED:
            if command == "pools" and flag in POOLS_MODELS:
                continue
            cases.append(
                _case([*_base(command), flag, *value], f"{flag}{' ' + value[0] if value else ''}: ", 1)
            )
        if command != "pools":  # served HiCache refuses what the engine does not serve, in one line
            hicache = [*_base(command), "--enable-hierarchical-cache", "--tombstone", "legacy"]
            cases.append(_late(hicache, "--tombstone legacy with HiCache: SGLang does not support it"))
    for flag, values in SERVER_NUMERIC:
        if flag in ("--page-size", "--swa-eviction-interval"):
            cases += _numeric("cache-replay", flag, values)
    for flag in ("--radix-eviction-policy", "--swa-eviction", "--tombstone"):
        cases.append(_case([*_base("cache-replay"), flag, "bogus"], flag, 2))
    return cases


def command_flag_cases() -> list[dict]:
    cases = []
    run_own = [
        ("--limit", COUNT),
        ("--block-size", TOKEN_LIKE),
        ("--time-scale", NON_NEG),
        ("--request-rate", RATE),
        ("--think-time", NON_NEG),
        ("--seed", SEED),
        ("--max-abort-fraction", [("-0.5", 2), ("2", 2), ("nan", 2), ("x", 2)]),
    ]
    for flag, values in run_own:
        cases += _numeric("run", flag, values)
    cases.append(_case([*_base("run"), "--format", "bogus"], "--format", 2))
    cases.append(_case([*_base("run"), "--request-rate", "2", "--time-scale", "2"], "--time-scale", 1))
    bench_own = [
        ("--num-clients", COUNT),
        ("--num-rounds", COUNT),
        ("--min-rounds", [("-1", 1), ("abc", 2)]),
        ("--max-rounds", [("-1", 1), ("abc", 2)]),
        ("--request-length", TOKEN_LIKE),
        ("--output-length", TOKEN_LIKE),
        ("--sub-question-input-length", [("-1", 1), ("abc", 2), (str(2**31), 1)]),
        ("--range-ratio", FRACTION),
        ("--request-rate", RATE),
        ("--max-parallel", COUNT),
        ("--seed", SEED),
    ]
    for flag, values in bench_own:
        cases += _numeric("bench-multiturn", flag, values)
    cases.append(_case([*_base("bench-multiturn"), "--distribution", "gaussian"], "distribution", 1))
    cases.append(
        _case([*_base("bench-multiturn"), "--ready-queue-policy", "lifo"], "--ready-queue-policy", 1)
    )
    cases.append(_case([*_base("bench-multiturn"), "--min-rounds", "5", "--max-rounds", "2"], "rounds", 1))
    pools_own = [
        ("--context-length", TOKEN_LIKE),
        ("--hicache-ratio", POSITIVE),
        ("--hicache-size", NON_NEG),
    ]
    for flag, values in pools_own:
        cases += _numeric("pools", flag, values)
    cases.append(_case([*_base("pools"), "--kv-cache-dtype", "int3"], "--kv-cache-dtype", 2))
    cases.append(
        _case([*_base("pools"), "--attention-backend", "warp-drive"], "--attention-backend 'warp-drive'", 1)
    )
    replay_own = [
        ("--full-tokens", TOKEN_LIKE),
        ("--swa-tokens", TOKEN_LIKE),
        ("--window", TOKEN_LIKE),
        ("--limit", COUNT),
    ]
    for flag, values in replay_own:
        cases += _numeric("cache-replay", flag, values)
    for command in ("trace stats", "trace head", "trace convert"):
        cases += _numeric(command, "--block-size", [("0", 2), ("-1", 2), (str(2**30 + 1), 2), ("abc", 2)])
        cases.append(_case([*_base(command), "--format", "bogus"], "--format", 2))
        cases.append(_case([*_base(command), "--continuation", "sometimes"], "--continuation", 2))
    cases += _numeric("trace stats", "--page-size", [("0", 2), ("-64", 2), ("abc", 2)])
    cases += _numeric("trace head", "-n", [("-1", 2), ("ten", 2)])
    cases.append(_case(["run", "--no-such-flag"], "--no-such-flag", 2))
    cases.append(_case(["frobnicate"], "frobnicate", 2))
    cases.append(_case(["trace", "frobnicate"], "frobnicate", 2))
    cases.append(_case(["ops", "stats"], "Missing argument", 2))
    return cases


def path_flag_cases() -> list[dict]:
    """Unusable output paths, refused before any work, never replacing what is there."""
    copy = ["copy", TRACE, "{tmp}/in.jsonl"]
    cases = []
    for command in ("run", "bench-multiturn"):
        base = _base(command)
        cases += [
            _case([*base, "--out", "{tmp}/file/sub/out"], "is not a directory", 1, [["file", "{tmp}/file"]]),
            _case([*base, "--out", "{tmp}/file"], "--out", 1, [["file", "{tmp}/file"]]),
            _case([*base, "--out", "/dev/null"], "--out", 1),
            _case([*base, "--out", "{tmp}/fifo"], "--out", 1, [["fifo", "{tmp}/fifo"]]),
            _case(
                [*base, "--out", "{tmp}/link"],
                "--out",
                1,
                [["file", "{tmp}/f"], ["symlink", "{tmp}/f", "{tmp}/link"]],
            ),
            _case(
                [*base, "--out", "{tmp}/d"],
                "summary.json is a symlink",
                1,
                [["dir", "{tmp}/d"], ["file", "{tmp}/f"], ["symlink", "{tmp}/f", "{tmp}/d/summary.json"]],
            ),
            _case([*base, "--record-ops", "{tmp}/d"], "--record-ops", 1, [["dir", "{tmp}/d"]]),
            _case([*base, "--record-ops", "/dev/null"], "--record-ops", 1),
            _case([*base, "--record-ops", "{tmp}/file/ops.npz"], "--record-ops", 1, [["file", "{tmp}/file"]]),
            _case(
                [*base, "--record-ops", "{tmp}/link"],
                "is a symlink",
                1,
                [["file", "{tmp}/f"], ["symlink", "{tmp}/f", "{tmp}/link"]],
            ),
        ]
    conv = ["trace", "convert", "{tmp}/in.jsonl", "-o"]
    cases += [
        _case([*conv, "{tmp}/in.jsonl"], "in.jsonl", 1, [copy]),
        _case([*conv, "/dev/null"], "/dev/null", 1, [copy]),
        _case([*conv, "{tmp}"], "directory", 1, [copy]),
        _case([*conv, "{tmp}/link"], "link", 1, [copy, ["symlink", "{tmp}/in.jsonl", "{tmp}/link"]]),
        _case([*conv, "{tmp}/hard"], "hard", 1, [copy, ["hardlink", "{tmp}/in.jsonl", "{tmp}/hard"]]),
        _case([*conv, "{tmp}/fifo"], "fifo", 1, [copy, ["fifo", "{tmp}/fifo"]]),
        _case(
            [*conv, "{tmp}/file/out.parquet"],
            "file/out.parquet: directory {tmp}/file is not a directory",
            1,
            [copy, ["file", "{tmp}/file"]],
        ),
        _case(
            [*conv, "{tmp}/missing/out.parquet"],
            "missing/out.parquet: directory {tmp}/missing does not exist",
            1,
            [copy],
        ),
    ]
    return cases


def _late(argv: list[str], error: str) -> dict[str, Any]:
    """A refusal that comes from the pool sizing at the start of the run (after the trace is read,
    before any request is served), not from the flag checks: exit 1, one line."""
    return {**_case(argv, error, 1), "late": True}


def runtime_flag_cases() -> list[dict]:
    """Values that are valid flags but make requests fail: the run must say so and exit 3."""
    return [
        _case(
            [*_base("run"), "--max-total-tokens", "300"],
            "1 rejected: prompt exceeds the maximum allowed input length",
            3,
        ),
        _late(
            [*_base("run"), "--max-total-tokens", "64"], "SWA pool (51 tokens) cannot hold even one request"
        ),
        _case([*_base("demo"), "--max-total-tokens", "300"], "1 rejected", 3),
        _case([*_base("bench-multiturn"), "--request-length", "200000"], "rejected", 3),
        _case([*_base("cache-replay"), "--full-tokens", "300", "--swa-tokens", "200"], "aborted", 3),
        _case(
            [*_base("cache-replay"), "--full-tokens", "64", "--swa-tokens", "64"],
            "cannot hold sliding window 127 + page 1",
            1,
        ),
        _case([*_base("run"), "--context-length", "10"], "--context-length", 2),
        _late(
            [*_base("run"), "--page-size", "4096", "--max-total-tokens", "3000"],
            "cannot hold even one request",
        ),
        _late([*_base("demo"), "--gpu", "L40S", "--tp", "1"], "Use --tp 2 or more"),
        _case([*_base("run"), "--block-size", str(10**12)], "--block-size must be in", 1),
    ]


def accepted_flag_cases() -> list[dict]:
    """Unusual but valid values: the run finishes (exit 0) and its report says what happened."""
    ok = [
        ([*_base("run"), "--request-rate", "inf"], "(open loop, one request)"),
        (
            ["run", "--trace", "{cases}/mooncake-crlf.jsonl", "--request-rate", "inf"],
            "(open loop, all sent at the same time)",
        ),
        (
            ["run", "--trace", "{cases}/mooncake-crlf.jsonl", "--time-scale", "0"],
            "(open loop, all sent at the same time)",
        ),
        (
            ["run", "--trace", "{cases}/mooncake-crlf.jsonl", "--request-rate", "1e9"],
            "at 1000000000.0 requests per second",
        ),
        (
            [*_base("bench-multiturn"), "--request-rate", "inf"],
            "Total requests: 4 at inf requests per second",
        ),
        ([*_base("bench-multiturn"), "--disable-auto-run"], "Total requests: 4 at 1.0 requests per second"),
        ([*_base("bench-multiturn"), "--min-rounds", "0", "--max-rounds", "0"], "Total requests: 4"),
        ([*_base("pools"), "--tp", "64", "--json"], '"tp_size": 64'),
        ([*_base("cache-replay"), "--limit", "1000"], "requests"),
        ([*_base("trace head"), "-n", "0"], "Empty DataFrame"),
    ]
    return [_case(argv, out, 0) for argv, out in ok]


def flag_cases() -> list[dict]:
    cases = (
        server_flag_cases()
        + command_flag_cases()
        + path_flag_cases()
        + runtime_flag_cases()
        + accepted_flag_cases()
    )
    seen: dict[str, int] = {}
    for case in cases:
        key = " ".join(case["argv"])
        seen[key] = seen.get(key, 0) + 1
        case["id"] = key if seen[key] == 1 else f"{key} #{seen[key]}"
    return cases
