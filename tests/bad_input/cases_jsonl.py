"""JSON-lines cases: Mooncake hash-id JSONL, raw-token JSONL (tokens multiturn) and Dynamo events.

Each family starts from a small valid file and breaks one field of line 2 (line 1 stays valid, so
format detection succeeds and the error must come from the reader, naming line 2 and the field).
"""

from __future__ import annotations

from corpus import Case, dumps, err, lines, result

MAX = 2**30
# (slug, raw JSON value, problem substring) for a token-count field; problem None = read correctly.
LENGTH_VALUES = [
    ("zero", "0", "must be >= 1, got 0"),
    ("negative", "-1", "must be >= 1, got -1"),
    ("very-negative", "-9223372036854775809", "must be >= 1"),
    ("float", "1.5", "must be an integer, got float 1.5"),
    ("float-integral", "1000.0", "must be an integer, got float"),
    ("exponent", "1e3", "must be an integer, got float"),
    ("string-number", '"1200"', "must be an integer, got str"),
    ("text", '"abc"', "must be an integer, got str"),
    ("bool-true", "true", "must be an integer, got bool"),
    ("bool-false", "false", "must be an integer, got bool"),
    ("null", "null", "must be an integer, got NoneType"),
    ("nan", "NaN", "must be an integer, got float nan"),
    ("infinity", "Infinity", "must be an integer, got float inf"),
    ("list", "[1200]", "must be an integer, got list"),
    ("object", '{"n": 1200}', "must be an integer, got dict"),
    ("over-max", str(MAX + 1), "must be <= 1,073,741,824"),
    ("int32-overflow", str(2**31), "must be <= 1,073,741,824"),
    ("int64-overflow", str(2**64), "must be <= 1,073,741,824"),
    ("forty-digits", "9" * 40, "must be <= 1,073,741,824"),
]
TIMESTAMP_VALUES = [
    ("text", '"abc"', "must be a number, got 'abc'"),
    ("null", "null", "must be a number, got NoneType"),
    ("bool", "true", "must be a number, got bool"),
    ("list", "[10]", "must be a number, got list"),
    ("nan", "NaN", "must be a finite number"),
    ("infinity", "Infinity", "must be a finite number"),
    ("minus-infinity", "-Infinity", "must be a finite number"),
    ("overflow-float", "1e999", "must be a finite number"),
    ("huge-integer", "9" * 400, "must be a finite number"),
    ("nan-string", '"nan"', "must be a finite number"),
    ("empty-string", '""', "must be a number, got ''"),
]


# --- Mooncake -----------------------------------------------------------------------------------
MC1 = dumps({"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]})
MC3 = dumps({"timestamp": 20, "input_length": 100, "output_length": 3, "hash_ids": [9]})
MC_TOTALS = (600 + 1200 + 100, 5 + 7 + 3)


def _mc2(ts: str = "10", n_in: str = "1200", n_out: str = "7", ids: str = "[1, 2, 3]", drop: str = "") -> str:
    parts = {"timestamp": ts, "input_length": n_in, "output_length": n_out, "hash_ids": ids}
    return "{" + ", ".join(f'"{k}": {v}' for k, v in parts.items() if k != drop) + "}"


def _mc_case(slug: str, line2: str, expect: dict, desc: str, **kw) -> Case:
    name = f"mooncake-{slug}.jsonl"
    return Case(name, {name: lines(MC1, line2, MC3)}, name, expect, desc, **kw)


def mooncake_cases() -> list[Case]:
    cases = []
    for fld, arg in (("input_length", "n_in"), ("output_length", "n_out")):
        for slug, raw, problem in LENGTH_VALUES:
            name = f"mooncake-{fld}-{slug}.jsonl"
            cases.append(
                _mc_case(
                    f"{fld}-{slug}", _mc2(**{arg: raw}), err(name, 2, fld, problem), f"{fld} = {raw[:20]}"
                )
            )
    for slug, raw, problem in TIMESTAMP_VALUES:
        name = f"mooncake-timestamp-{slug}.jsonl"
        cases.append(
            _mc_case(
                f"timestamp-{slug}",
                _mc2(ts=raw),
                err(name, 2, "timestamp", problem),
                f"timestamp = {raw[:20]}",
            )
        )
    hash_bad = [
        ("null", "null", "hash_ids", "must be a list of integers, got NoneType"),
        ("string", '"1,2,3"', "hash_ids", "must be a list of integers, got str"),
        ("object", '{"a": 1}', "hash_ids", "must be a list of integers, got dict"),
        ("too-few", "[1, 2]", "hash_ids", "has 2 ids but the input length 1200 needs ceil(1200/512) = 3"),
        ("too-many", "[1, 2, 3, 4]", "hash_ids", "has 4 ids but the input length 1200 needs"),
        ("empty", "[]", "hash_ids", "has 0 ids"),
        ("bool-true", "[1, true, 3]", "hash_ids[1]", "must be an integer, got bool True"),
        ("bool-false", "[false, 2, 3]", "hash_ids[0]", "must be an integer, got bool False"),
        ("float", "[1, 2.5, 3]", "hash_ids[1]", "must be an integer, got float"),
        ("text", '["a", 2, 3]', "hash_ids[0]", "must be an integer, got str"),
        ("null-element", "[1, 2, null]", "hash_ids[2]", "must be an integer, got NoneType"),
        ("nested-list", "[1, [2], 3]", "hash_ids[1]", "must be an integer, got list"),
        ("u64-overflow", f"[1, 2, {2**64}]", "hash_ids", "integer out of range"),
        ("huge-negative", f"[1, 2, {-(2**64)}]", "hash_ids", "integer out of range"),
    ]
    for slug, raw, fld, problem in hash_bad:
        name = f"mooncake-hash_ids-{slug}.jsonl"
        cases.append(
            _mc_case(f"hash_ids-{slug}", _mc2(ids=raw), err(name, 2, fld, problem), f"hash_ids = {raw}")
        )
    for fld in ("timestamp", "input_length", "output_length", "hash_ids"):
        name = f"mooncake-missing-{fld}.jsonl"
        cases.append(_mc_case(f"missing-{fld}", _mc2(drop=fld), err(name, 2, fld, "missing"), f"no {fld}"))
    not_object = [
        ("list", "[1, 2]", "list"),
        ("string", '"record"', "str"),
        ("number", "42", "int"),
        ("null", "null", "NoneType"),
    ]
    for slug, raw, typ in not_object:
        name = f"mooncake-record-{slug}.jsonl"
        cases.append(
            _mc_case(
                f"record-{slug}",
                raw,
                err(name, 2, None, f"expected a JSON object, got {typ}"),
                f"line 2 is {raw}",
            )
        )
    bad_json = [
        ("truncated", '{"timestamp": 10, "input_length": 1200'),
        ("trailing-comma", _mc2()[:-1] + ", }"),
        ("single-quotes", _mc2().replace('"', "'")),
        ("open-brace", "{"),
        ("two-records-one-line", _mc2() + " " + _mc2()),
        ("bare-word", "hello"),
    ]
    for slug, raw in bad_json:
        name = f"mooncake-json-{slug}.jsonl"
        cases.append(
            _mc_case(f"json-{slug}", raw, err(name, 2, None, "invalid JSON"), f"invalid JSON: {slug}")
        )
    name = "mooncake-json-nested-deep.jsonl"
    cases.append(
        _mc_case(
            "json-nested-deep", "[" * 100_000, err(name, 2, None, "invalid JSON"), "100,000 open brackets"
        )
    )
    cases += _mooncake_valid() + _mooncake_format_flags() + _mooncake_whole_file()
    return cases


def _mooncake_valid() -> list[Case]:
    n_in, n_out = MC_TOTALS
    ok = result(3, n_in, n_out)
    cases = [
        _mc_case("string-timestamp", _mc2(ts='"10"'), ok, "a timestamp written as a string of a number"),
        _mc_case("float-timestamp", _mc2(ts="10.25"), ok, "fractional milliseconds"),
        _mc_case("negative-hash-ids", _mc2(ids="[-1, -2, -3]"), ok, "negative hash ids are ids"),
        _mc_case("i64-max-hash-id", _mc2(ids=f"[1, 2, {2**63 - 1}]"), ok, "the largest int64 id"),
        _mc_case(
            "extra-fields", _mc2()[:-1] + ', "note": "x", "input_tokens": [1]}', ok, "unknown fields ignored"
        ),
        _mc_case("same-timestamp", _mc2(ts="0"), ok, "two arrivals at one time (a burst)"),
        _mc_case(
            "exact-max-length", _mc2(n_out=str(2**20)), result(3, n_in, 5 + 2**20 + 3), "a 2**20-token output"
        ),
    ]
    name = "mooncake-unsorted.jsonl"
    cases.append(
        Case(
            name,
            {name: lines(MC3, _mc2(), MC1)},
            name,
            result(3, n_in, n_out, "timestamps are not sorted"),
            "arrivals out of order",
        )
    )
    variants = [
        ("bom", b"\xef\xbb\xbf" + lines(MC1, _mc2(), MC3), "a UTF-8 byte-order mark"),
        ("crlf", lines(MC1, _mc2(), MC3, nl="\r\n"), "Windows line ends"),
        ("bom-crlf", b"\xef\xbb\xbf" + lines(MC1, _mc2(), MC3, nl="\r\n"), "BOM and CRLF"),
        ("blank-lines", lines("", MC1, "", "   ", _mc2(), "\t", MC3, ""), "blank lines are not records"),
        ("no-final-newline", lines(MC1, _mc2(), MC3, trailing=False), "no newline at the end"),
        ("indented", lines("  " + MC1, "\t" + _mc2(), MC3 + "   "), "leading and trailing white space"),
    ]
    for slug, data, desc in variants:
        name = f"mooncake-{slug}.jsonl"
        cases.append(Case(name, {name: data}, name, ok, desc))
    name = "mooncake-one-record.jsonl"
    cases.append(Case(name, {name: lines(MC1)}, name, result(1, 600, 5), "a single request"))
    # A prompt longer than the model's context: read by the trace commands, rejected by `run` as
    # SGLang's validate_input_length rejects it (gpt-oss-120b: 131,072 tokens).
    name = "mooncake-over-context.jsonl"
    long = _mc2(n_in="204800", ids="[1, 2]")
    rejected = {"exit": 3, "error": "rejected", "result": {"requests": 3, "rejected": 1}}
    cases.append(
        Case(
            name,
            {name: lines(MC1.replace("[1, 2]", "[1]"), long, MC3)},
            name,
            result(3, 600 + 204800 + 100, 15),
            "a 204,800-token prompt (block size 102,400) over gpt-oss-120b's context",
            args=["--block-size", "102400"],
            per_command={"run": rejected},
        )
    )
    return cases


def _mooncake_format_flags() -> list[Case]:
    data = lines(MC1, _mc2(), MC3)
    out = []
    flagged = [
        (
            "block-size-256",
            ["--block-size", "256"],
            err(
                "mooncake-block-size-256.jsonl",
                1,
                "hash_ids",
                "has 2 ids but the input length 600 needs ceil(600/256) = 3",
            ),
        ),
        (
            "block-size-1024",
            ["--block-size", "1024"],
            err(
                "mooncake-block-size-1024.jsonl",
                1,
                "hash_ids",
                "has 2 ids but the input length 600 needs ceil(600/1024) = 1",
            ),
        ),
        ("as-azure", ["--format", "azure"], err("mooncake-as-azure.jsonl", 1, None, "expected header")),
        ("as-tokens", ["--format", "tokens"], err("mooncake-as-tokens.jsonl", 1, "rid", "missing")),
        ("as-dynamo", ["--format", "dynamo-events"], err("mooncake-as-dynamo.jsonl", 1, "event", "missing")),
        (
            "as-ragpulse",
            ["--format", "ragpulse"],
            err("mooncake-as-ragpulse.jsonl", None, None, "RAGPulse component table"),
        ),
        (
            "as-parquet",
            ["--format", "parquet"],
            err("mooncake-as-parquet.jsonl", None, None, "not a readable parquet file"),
        ),
    ]
    for slug, args, expect in flagged:
        name = f"mooncake-{slug}.jsonl"
        out.append(Case(name, {name: data}, name, expect, f"{' '.join(args)} on a Mooncake file", args=args))
    return out


def _mooncake_whole_file() -> list[Case]:
    specs = [
        ("empty.jsonl", b"", err("empty.jsonl", None, None, "empty trace")),
        ("blank-only.jsonl", b"\n\n   \n\t\n", err("blank-only.jsonl", None, None, "empty trace")),
        ("bom-only.jsonl", b"\xef\xbb\xbf\n", err("bom-only.jsonl", None, None, "empty trace")),
        (
            "first-line-text.jsonl",
            lines("hello world", MC1),
            err("first-line-text.jsonl", None, None, "unknown trace format"),
        ),
        (
            "first-line-list.jsonl",
            lines("[1, 2, 3]", MC1),
            err("first-line-list.jsonl", None, None, "unknown trace format"),
        ),
        (
            "first-line-empty-object.jsonl",
            lines("{}", MC1),
            err("first-line-empty-object.jsonl", None, None, "unknown trace format"),
        ),
        (
            "first-line-number.jsonl",
            lines("12345"),
            err("first-line-number.jsonl", None, None, "unknown trace format"),
        ),
        (
            "first-line-hash-only.jsonl",
            lines('{"hash_ids": [1]}'),
            err("first-line-hash-only.jsonl", 1, "timestamp", "missing"),
        ),
    ]
    return [Case(n, {n: d}, n, e, f"whole file: {n}") for n, d, e in specs]


# --- raw-token JSONL (tokens multiturn) -----------------------------------------------------------
TK1 = dumps({"rid": "a", "input_ids": [1, 2, 3, 4], "output_ids": [5, 6], "session": "s1"})
TK3 = dumps({"rid": "c", "input_ids": [7, 8], "output_ids": [9], "session": "s2"})


def _tk2(**over: str) -> str:
    parts = {"rid": '"b"', "input_ids": "[1, 2, 3, 4, 5, 6, 10]", "output_ids": "[11]", "session": '"s1"'}
    parts.update(over)
    return "{" + ", ".join(f'"{k}": {v}' for k, v in parts.items() if v is not None) + "}"


def token_cases() -> list[Case]:
    bad = [
        ("rid-missing", {"rid": None}, "rid", "missing"),
        ("rid-empty", {"rid": '""'}, "rid", "must be a non-empty string"),
        ("rid-int", {"rid": "2"}, "rid", "must be a non-empty string"),
        ("rid-null", {"rid": "null"}, "rid", "must be a non-empty string"),
        ("rid-duplicate", {"rid": '"a"'}, "rid", "duplicate rid 'a' (first at line 1)"),
        ("session-bool", {"session": "true"}, "session", "must be a string or an integer"),
        ("session-float", {"session": "1.5"}, "session", "must be a string or an integer"),
        ("session-list", {"session": '["s1"]'}, "session", "must be a string or an integer"),
        ("session-int-after-str", {"session": "1"}, "session", "mixes integer and string sessions"),
        # the client columns (trace format 2): max_new_tokens >= 1, ignore_eos a JSON boolean
        ("max-new-tokens-zero", {"max_new_tokens": "0"}, "max_new_tokens", "must be >= 1, got 0"),
        (
            "max-new-tokens-float",
            {"max_new_tokens": "2.5"},
            "max_new_tokens",
            "must be an integer, got float",
        ),
        ("max-new-tokens-bool", {"max_new_tokens": "true"}, "max_new_tokens", "must be an integer, got bool"),
        ("max-new-tokens-text", {"max_new_tokens": '"20"'}, "max_new_tokens", "must be an integer, got str"),
        (
            "max-new-tokens-over-max",
            {"max_new_tokens": str(2**31)},
            "max_new_tokens",
            "must be <= 1,073,741,824",
        ),
        ("ignore-eos-int", {"ignore_eos": "1"}, "ignore_eos", "must be true or false, got 1"),
        ("ignore-eos-text", {"ignore_eos": '"yes"'}, "ignore_eos", "must be true or false, got 'yes'"),
    ]
    for key in ("input_ids", "output_ids"):
        bad += [
            (f"{key}-missing", {key: None}, key, "missing"),
            (f"{key}-empty", {key: "[]"}, key, "must be a non-empty list of integers"),
            (f"{key}-string", {key: '"1 2 3"'}, key, "must be a non-empty list of integers"),
            (f"{key}-null", {key: "null"}, key, "must be a non-empty list of integers"),
            (f"{key}-negative", {key: "[1, -1]"}, f"{key}[1]", "must be >= 0, got -1"),
            (f"{key}-over-int32", {key: f"[1, {2**31}]"}, f"{key}[1]", "must be in [0, 2**31 - 1]"),
            (f"{key}-u64-overflow", {key: f"[1, {2**64}]"}, key, "integer out of range"),
            (f"{key}-bool", {key: "[1, true]"}, f"{key}[1]", "must be an integer, got bool"),
            (f"{key}-float", {key: "[1.5, 2]"}, f"{key}[0]", "must be an integer, got float"),
            (f"{key}-text", {key: '[1, "2"]'}, f"{key}[1]", "must be an integer, got str"),
            (f"{key}-nested", {key: "[[1], 2]"}, f"{key}[0]", "must be an integer, got list"),
        ]
    cases = []
    for slug, over, fld, problem in bad:
        name = f"tokens-{slug}.jsonl"
        cases.append(
            Case(name, {name: lines(TK1, _tk2(**over), TK3)}, name, err(name, 2, fld, problem), slug)
        )
    ok = result(3, 4 + 7 + 2, 2 + 1 + 1)
    valid = [
        ("no-session", lines(TK1, _tk2(session=None), TK3), ok, "a request without a session"),
        ("null-session", lines(TK1, _tk2(session="null"), TK3), ok, "session null = none"),
        (
            "int-sessions",
            lines(TK1.replace('"s1"', "1"), _tk2(session="1"), TK3.replace('"s2"', "2")),
            ok,
            "integer sessions",
        ),
        ("bom", b"\xef\xbb\xbf" + lines(TK1, _tk2(), TK3), ok, "a UTF-8 BOM"),
        ("extra-fields", lines(TK1, _tk2(extra='{"x": 1}'), TK3), ok, "unknown fields ignored"),
        ("max-token-id", lines(TK1, _tk2(output_ids=f"[{2**31 - 1}]"), TK3), ok, "token id 2**31 - 1"),
        (
            "client-fields",
            lines(TK1, _tk2(max_new_tokens="20", ignore_eos="false"), TK3),
            ok,
            "max_new_tokens and ignore_eos on one line",
        ),
        (
            "client-fields-null",
            lines(TK1, _tk2(max_new_tokens="null", ignore_eos="null"), TK3),
            ok,
            "null = not sent",
        ),
    ]
    for slug, data, expect, desc in valid:
        name = f"tokens-{slug}.jsonl"
        cases.append(Case(name, {name: data}, name, expect, desc))
    name = "tokens-first-line-rid-missing.jsonl"
    first = dumps({"input_ids": [1], "output_ids": [2]})
    cases.append(
        Case(name, {name: lines(first, TK1)}, name, err(name, 1, "rid", "missing"), "no rid on line 1")
    )
    return cases


# --- Dynamo request-trace events ------------------------------------------------------------------
def _event(
    rid: str = "r1", t: int = 1000, session: str | None = "s1", replay: dict | None = None, **req
) -> dict:
    request = {
        "request_id": rid,
        "request_received_ms": t,
        "output_tokens": 3,
        "cached_tokens": 0,
        "replay": {"trace_block_size": 16, "input_length": 20, "input_sequence_hashes": [11, 12]}
        if replay is None
        else replay,
    }
    request.update(req)
    ev: dict = {"schema": "dynamo.request.trace.v1", "event_type": "request_end", "request": request}
    if session is not None:
        ev["agent_context"] = {"session_id": session}
    return {"timestamp": t, "event": ev}


DY1 = dumps(_event())
DY3 = dumps(
    _event("r3", 3000, "s2", {"trace_block_size": 16, "input_length": 5, "input_sequence_hashes": [40]})
)
_REPLAY = {"trace_block_size": 16, "input_length": 40, "input_sequence_hashes": [11, 12, 13]}


def _dy2(replay_over: dict | None = None, drop_replay: str = "", **req) -> str:
    replay = {**_REPLAY, **(replay_over or {})}
    replay.pop(drop_replay, None)
    return dumps(_event("r2", 2000, "s1", replay, **req))


def dynamo_cases() -> list[Case]:
    R = "event.request."
    specs: list[tuple[str, str, str | None, str]] = [
        ("not-object-event", dumps({"event": 5}), "event", "must be an object, got int"),
        ("no-event", dumps({"timestamp": 1}), "event", "missing"),
        (
            "wrong-schema",
            dumps({"event": {"schema": "dynamo.request.trace.v2"}}),
            "event.schema",
            "expected 'dynamo.request.trace.v1'",
        ),
        (
            "no-event-type",
            dumps({"event": {"schema": "dynamo.request.trace.v1"}}),
            "event.event_type",
            "missing",
        ),
        (
            "no-request",
            dumps({"event": {"schema": "dynamo.request.trace.v1", "event_type": "request_end"}}),
            "event.request",
            "missing",
        ),
        (
            "request-list",
            dumps(
                {"event": {"schema": "dynamo.request.trace.v1", "event_type": "request_end", "request": []}}
            ),
            "event.request",
            "must be an object, got list",
        ),
        (
            "no-replay",
            dumps(
                {
                    "event": {
                        "schema": "dynamo.request.trace.v1",
                        "event_type": "request_end",
                        "request": {"request_id": "x"},
                    }
                }
            ),
            R + "replay",
            "missing",
        ),
        ("block-size-zero", _dy2({"trace_block_size": 0}), R + "replay.trace_block_size", "must be >= 1"),
        (
            "block-size-differs",
            _dy2({"trace_block_size": 32, "input_sequence_hashes": [11, 12]}),
            R + "replay.trace_block_size",
            "32 differs from the file's first block size 16",
        ),
        (
            "block-size-huge",
            _dy2({"trace_block_size": 2**40}),
            R + "replay.trace_block_size",
            "must be <= 1,073,741,824",
        ),
        ("input-length-zero", _dy2({"input_length": 0}), R + "replay.input_length", "must be >= 1"),
        (
            "input-length-text",
            _dy2({"input_length": "40"}),
            R + "replay.input_length",
            "must be an integer, got str",
        ),
        (
            "input-length-over-max",
            _dy2({"input_length": 2**31}),
            R + "replay.input_length",
            "must be <= 1,073,741,824",
        ),
        ("output-tokens-zero", _dy2(output_tokens=0), R + "output_tokens", "must be >= 1, got 0"),
        ("output-tokens-negative", _dy2(output_tokens=-3), R + "output_tokens", "must be >= 1"),
        (
            "output-tokens-float",
            _dy2(output_tokens=2.5),
            R + "output_tokens",
            "must be an integer, got float",
        ),
        (
            "received-missing",
            _dy2(request_received_ms=None),
            R + "request_received_ms",
            "must be an integer, got NoneType",
        ),
        (
            "received-text",
            _dy2(request_received_ms="soon"),
            R + "request_received_ms",
            "must be an integer, got str",
        ),
        ("received-negative", _dy2(request_received_ms=-5), R + "request_received_ms", "must be >= 0"),
        ("received-huge", _dy2(request_received_ms=2**60), R + "request_received_ms", "must be <="),
        (
            "hashes-missing",
            _dy2(drop_replay="input_sequence_hashes"),
            R + "replay.input_sequence_hashes",
            "missing",
        ),
        (
            "hashes-too-few",
            _dy2({"input_sequence_hashes": [11]}),
            R + "replay.input_sequence_hashes",
            "has 1 ids",
        ),
        (
            "hashes-bool",
            _dy2({"input_sequence_hashes": [11, True, 13]}),
            R + "replay.input_sequence_hashes[1]",
            "must be an integer, got bool True",
        ),
        (
            "hashes-negative",
            _dy2({"input_sequence_hashes": [11, -12, 13]}),
            R + "replay.input_sequence_hashes[1]",
            "must be >= 0",
        ),
        (
            "hashes-over-u64",
            _dy2({"input_sequence_hashes": [11, 2**64, 13]}),
            R + "replay.input_sequence_hashes",
            "integer out of range",
        ),
        (
            "hashes-text",
            _dy2({"input_sequence_hashes": "11,12,13"}),
            R + "replay.input_sequence_hashes",
            "must be a list",
        ),
        ("request-id-missing", _dy2(request_id=None), R + "request_id", "must be a non-empty string"),
        ("request-id-empty", _dy2(request_id=""), R + "request_id", "must be a non-empty string"),
        ("request-id-int", _dy2(request_id=7), R + "request_id", "must be a non-empty string"),
        (
            "request-id-duplicate",
            _dy2(request_id="r1"),
            R + "request_id",
            "duplicate request id 'r1' (first at line 1)",
        ),
        (
            "session-int",
            dumps(
                {
                    **_event("r2", 2000, None),
                    "event": {**_event("r2", 2000, None)["event"], "agent_context": {"session_id": 5}},
                }
            ),
            "event.agent_context.session_id",
            "must be a string",
        ),
        ("cached-negative", _dy2(cached_tokens=-1), R + "cached_tokens", "must be >= 0"),
        ("cached-text", _dy2(cached_tokens="all"), R + "cached_tokens", "must be an integer, got str"),
    ]
    cases = []
    for slug, line2, fld, problem in specs:
        name = f"dynamo-{slug}.jsonl"
        cases.append(Case(name, {name: lines(DY1, line2, DY3)}, name, err(name, 2, fld, problem), slug))
    tool = dumps({"event": {"schema": "dynamo.request.trace.v1", "event_type": "tool_start"}})
    ok = result(3, 20 + 40 + 5, 9)
    more = [
        ("valid-with-tools", lines(DY1, tool, _dy2(), tool, DY3), ok, "tool events are not requests"),
        (
            "unsorted",
            lines(DY3, _dy2(), DY1),
            result(3, 65, 9, "timestamps are not sorted"),
            "events written at completion",
        ),
        (
            "no-session",
            lines(dumps(_event(session=None)), _dy2(), DY3),
            ok,
            "a request without agent_context",
        ),
        (
            "only-tools",
            lines(tool, tool),
            err("dynamo-only-tools.jsonl", None, None, "no request_end events"),
            "no request_end",
        ),
    ]
    for slug, data, expect, desc in more:
        name = f"dynamo-{slug}.jsonl"
        cases.append(Case(name, {name: data}, name, expect, desc))
    return cases
