"""Azure CSV and RAGPulse (trace plus component tables) cases."""

from __future__ import annotations

from corpus import Case, dumps, err, lines, result

AZ_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"
AZ1 = "2023-11-16 18:15:46.6805900,374,44"
AZ3 = "2023-11-16 18:15:52.0000000,100,10"


def azure_cases() -> list[Case]:
    row2 = {"ts": "2023-11-16 18:15:50.9951690", "ctx": "396", "gen": "109"}
    cells = [
        ("ctx-zero", {"ctx": "0"}, "ContextTokens", "must be >= 1, got 0"),
        ("ctx-negative", {"ctx": "-5"}, "ContextTokens", "must be >= 1, got -5"),
        ("ctx-float", {"ctx": "1.5"}, "ContextTokens", "must be an integer, got '1.5'"),
        ("ctx-text", {"ctx": "many"}, "ContextTokens", "must be an integer, got 'many'"),
        ("ctx-empty", {"ctx": ""}, "ContextTokens", "must be an integer, got ''"),
        ("ctx-nan", {"ctx": "nan"}, "ContextTokens", "must be an integer, got 'nan'"),
        ("ctx-inf", {"ctx": "inf"}, "ContextTokens", "must be an integer, got 'inf'"),
        ("ctx-over-max", {"ctx": str(2**30 + 1)}, "ContextTokens", "must be <= 1,073,741,824"),
        ("ctx-int32-overflow", {"ctx": str(2**31)}, "ContextTokens", "must be <= 1,073,741,824"),
        ("ctx-forty-digits", {"ctx": "9" * 40}, "ContextTokens", "must be <= 1,073,741,824"),
        ("gen-zero", {"gen": "0"}, "GeneratedTokens", "must be >= 1, got 0"),
        ("gen-negative", {"gen": "-1"}, "GeneratedTokens", "must be >= 1"),
        ("gen-text", {"gen": "ten"}, "GeneratedTokens", "must be an integer, got 'ten'"),
        ("gen-over-max", {"gen": str(2**40)}, "GeneratedTokens", "must be <= 1,073,741,824"),
        ("gen-exponent", {"gen": "1e3"}, "GeneratedTokens", "must be an integer, got '1e3'"),
        ("ts-nat", {"ts": "NaT"}, "TIMESTAMP", "not a date-time"),
        ("ts-nan", {"ts": "nan"}, "TIMESTAMP", "not a date-time"),
        ("ts-empty", {"ts": ""}, "TIMESTAMP", "not a date-time"),
        ("ts-text", {"ts": "yesterday"}, "TIMESTAMP", "not a date-time"),
        ("ts-bad-month", {"ts": "2023-13-45 00:00:00"}, "TIMESTAMP", "not a date-time"),
        ("ts-year-9999", {"ts": "9999-01-01 00:00:00"}, "TIMESTAMP", "not a date-time"),
        ("ts-year-1", {"ts": "0001-01-01 00:00:00"}, "TIMESTAMP", "not a date-time"),
        ("ts-negative-epoch", {"ts": "-5"}, "TIMESTAMP", "not a date-time"),
        (
            "ts-epoch-mixed-with-dates",
            {"ts": "1700150150"},
            "TIMESTAMP",
            "epoch unit changes: date-time from line 2, seconds from line 3",
        ),
        ("ts-timezone", {"ts": "2023-11-16 18:15:50+00:00"}, "TIMESTAMP", "has a time zone"),
        ("ts-timezone-z", {"ts": "2023-11-16T18:15:50Z"}, "TIMESTAMP", "has a time zone"),
    ]
    cases = []
    for slug, over, fld, problem in cells:
        r = {**row2, **over}
        name = f"azure-{slug}.csv"
        data = lines(AZ_HEADER, AZ1, f"{r['ts']},{r['ctx']},{r['gen']}", AZ3)
        cases.append(Case(name, {name: data}, name, err(name, 3, fld, problem), f"row 2: {over}"))
    shape = [
        ("two-columns", "2023-11-16 18:15:50.9951690,396", 3, "expected 3 columns, got 2"),
        ("four-columns", "2023-11-16 18:15:50.9951690,396,109,7", 3, "expected 3 columns, got 4"),
        ("one-column", "garbage", 3, "expected 3 columns, got 1"),
    ]
    for slug, row, line, problem in shape:
        name = f"azure-{slug}.csv"
        cases.append(
            Case(name, {name: lines(AZ_HEADER, AZ1, row, AZ3)}, name, err(name, line, None, problem), slug)
        )
    headers = [
        (
            "header-renamed",
            "TIMESTAMP,ContextTokens,Generated",
            err("azure-header-renamed.csv", 1, None, "expected header"),
        ),
        (
            "header-extra-column",
            AZ_HEADER + ",Extra",
            err("azure-header-extra-column.csv", 1, None, "expected header"),
        ),
        (
            "header-lowercase",
            AZ_HEADER.lower(),
            err("azure-header-lowercase.csv", None, None, "unknown trace format"),
        ),
        ("header-missing", AZ1, err("azure-header-missing.csv", None, None, "unknown trace format")),
        (
            "header-zero-width-space",
            AZ_HEADER.replace(",Gen", ",\u200bGen"),
            err(
                "azure-header-zero-width-space.csv",
                1,
                None,
                "expected header TIMESTAMP,ContextTokens,GeneratedTokens, got "
                "'TIMESTAMP,ContextTokens,\\u200bGeneratedTokens'",
            ),
        ),
    ]
    for slug, header, expect in headers:
        name = f"azure-{slug}.csv"
        cases.append(Case(name, {name: lines(header, AZ1, AZ3)}, name, expect, slug))
    name = "azure-header-only.csv"
    cases.append(
        Case(
            name,
            {name: lines(AZ_HEADER)},
            name,
            err(name, None, None, "empty trace: no records"),
            "only a header",
        )
    )
    ok3 = result(3, 374 + 396 + 100, 44 + 109 + 10)
    row2_text = f"{row2['ts']},{row2['ctx']},{row2['gen']}"
    valid = [
        ("crlf", lines(AZ_HEADER, AZ1, row2_text, AZ3, nl="\r\n"), ok3, "CRLF line ends"),
        (
            "bom",
            b"\xef\xbb\xbf" + lines(AZ_HEADER, AZ1, row2_text, AZ3),
            ok3,
            "a UTF-8 BOM before the header",
        ),
        (
            "header-spaces",
            lines(AZ_HEADER.replace(",", ", "), AZ1, row2_text, AZ3),
            ok3,
            "spaces after the commas",
        ),
        ("blank-rows", lines(AZ_HEADER, AZ1, "", row2_text, ",,", AZ3), ok3, "blank and empty rows"),
        (
            "unsorted",
            lines(AZ_HEADER, AZ3, row2_text, AZ1),
            result(3, 870, 163, "timestamps are not sorted"),
            "rows out of time order",
        ),
        (
            "epoch-seconds",
            lines(AZ_HEADER, "1700158546,374,44", "1700158550.5,396,109", "1700158552,100,10"),
            ok3,
            "Unix epoch seconds",
        ),
        (
            "epoch-ms",
            lines(AZ_HEADER, "1700158546000,374,44", "1700158550500,396,109", "1700158552000,100,10"),
            ok3,
            "epoch milliseconds",
        ),
        (
            "date-only",
            lines(AZ_HEADER, "2023-11-16,374,44", "2023-11-17,396,109", "2023-11-18,100,10"),
            ok3,
            "dates without times",
        ),
    ]
    for slug, data, expect, desc in valid:
        name = f"azure-{slug}.csv"
        cases.append(Case(name, {name: data}, name, expect, desc))
    mixed_units = lines(AZ_HEADER, "1700158546,374,44", "1700158550000,396,109", "1700158552,100,10")
    name = "azure-epoch-unit-changes.csv"
    cases.append(
        Case(
            name,
            {name: mixed_units},
            name,
            err(name, 3, "TIMESTAMP", "epoch unit changes"),
            "seconds then ms",
        )
    )
    name = "azure-epoch-out-of-range.csv"
    cases.append(
        Case(
            name,
            {name: lines(AZ_HEADER, "1" + "0" * 20 + ",374,44")},
            name,
            err(name, 2, "TIMESTAMP", "epoch number 100000000000000000000 is out of range"),
            "1e20",
        )
    )
    name = "azure-over-context.csv"
    cases.append(
        Case(
            name,
            {name: lines(AZ_HEADER, AZ1, f"{row2['ts']},204800,109", AZ3)},
            name,
            result(3, 374 + 204800 + 100, 163),
            "a 204,800-token prompt over gpt-oss-120b's 131,072-token context",
            per_command={
                "run": {"exit": 3, "error": "rejected", "result": {"requests": 3, "rejected": 1}},
                "demo": {"exit": 3, "error": "rejected", "result": {"requests": 3, "rejected": 1}},
            },
        )
    )
    # The documented maximum, 2**30 tokens: read by the trace commands; `run` and `cache-replay`
    # (page ids at page size 1: 8 GiB) run in a subprocess under a memory limit (the corpus test).
    name = "azure-max-length.csv"
    cases.append(
        Case(
            name,
            {name: lines(AZ_HEADER, f"{row2['ts']},{2**30},44")},
            name,
            result(1, 2**30, 44),
            "a prompt of 2**30 tokens, the documented maximum",
            commands=["trace stats", "trace head", "trace convert"],
        )
    )
    name = "azure-quoted-newline.csv"
    quoted = lines(AZ_HEADER, AZ1, '"2023-11-16\n18:15:50",396,109', AZ3)
    cases.append(
        Case(
            name,
            {name: quoted},
            name,
            err(name, 4, "TIMESTAMP", "not a date-time"),
            "a quoted cell over two lines",
        )
    )
    return cases


# --- RAGPulse --------------------------------------------------------------------------------------
TABLES = {
    "1_sys_prompt.jsonl": ("sys_prompt_id", [(1, 64), (2, 32)]),
    "2_passages.jsonl": ("passage_id", [(10, 100), (11, 50)]),
    "3_history.jsonl": ("history_id", [(20, 8)]),
    "4_user_input.jsonl": ("user_input_id", [(30, 5), (31, 6)]),
    "5_web_search.jsonl": ("web_search_id", [(40, 16)]),
}


def _rp(ts: str = '"10"', n_in: int = 200, sess: object = "s1", **comp) -> dict:
    hash_ids = {
        "sys_prompt": [1],
        "passages_ids": [10],
        "history": [20],
        "web_search": [],
        "user_input": [30],
    }
    hash_ids.update(comp)
    return {
        "timestamp": ts,
        "input_length": n_in,
        "output_length": 4,
        "hash_ids": hash_ids,
        "session_id": sess,
    }


def _rp_line(obj: dict) -> str:
    ts = obj["timestamp"]
    text = dumps({**obj, "timestamp": 0})
    return text.replace('"timestamp": 0', f'"timestamp": {ts}', 1)


def _rp_dir(
    slug: str, line2: str, tables: dict[str, bytes] | None = None, drop: str = ""
) -> dict[str, bytes]:
    files = {}
    for fname, (key, rows) in TABLES.items():
        if fname == drop:
            continue
        files[f"ragpulse-{slug}/{fname}"] = lines(*(dumps({key: i, "token_length": n}) for i, n in rows))
    for fname, data in (tables or {}).items():
        files[f"ragpulse-{slug}/{fname}"] = data
    r1 = _rp_line(_rp('"1"', 180, "s1"))
    r3 = _rp_line(_rp('"30"', 190, "s2", sys_prompt=[2], passages_ids=[11], history=[], user_input=[31]))
    files[f"ragpulse-{slug}/0_trace.jsonl"] = lines(r1, line2, r3)
    return files


def ragpulse_cases() -> list[Case]:
    T = "0_trace.jsonl"
    bad = [
        ("timestamp-text", _rp_line(_rp('"soon"')), "timestamp", "must be a number, got 'soon'"),
        ("input-length-zero", _rp_line(_rp(n_in=0)), "input_length", "must be >= 1"),
        ("input-length-huge", _rp_line(_rp(n_in=2**31)), "input_length", "must be <= 1,073,741,824"),
        ("hash-ids-list", _rp_line({**_rp(), "hash_ids": [1, 2]}), "hash_ids", "must be an object, got list"),
        ("unknown-component", _rp_line(_rp(images=[1])), "hash_ids", "unknown component(s) ['images']"),
        (
            "component-missing",
            _rp_line({**_rp(), "hash_ids": {"sys_prompt": [1]}}),
            "hash_ids.passages_ids",
            "missing",
        ),
        ("component-not-list", _rp_line(_rp(history=20)), "hash_ids.history", "must be a list of integers"),
        (
            "segment-unknown",
            _rp_line(_rp(passages_ids=[10, 99])),
            "hash_ids.passages_ids[1]",
            "id 99 is not in 2_passages.jsonl",
        ),
        ("segment-negative", _rp_line(_rp(user_input=[-30])), "hash_ids.user_input[0]", "must be >= 0"),
        (
            "segment-bool",
            _rp_line(_rp(sys_prompt=[True])),
            "hash_ids.sys_prompt[0]",
            "must be an integer, got bool",
        ),
        (
            "segment-text",
            _rp_line(_rp(sys_prompt=["1"])),
            "hash_ids.sys_prompt[0]",
            "must be an integer, got str",
        ),
        (
            "session-missing",
            _rp_line({k: v for k, v in _rp().items() if k != "session_id"}),
            "session_id",
            "missing",
        ),
        ("session-empty", _rp_line(_rp(sess="")), "session_id", "must be a non-empty string"),
        ("session-int", _rp_line(_rp(sess=7)), "session_id", "must be a non-empty string"),
    ]
    cases = []
    for slug, line2, fld, problem in bad:
        d = f"ragpulse-{slug}"
        cases.append(Case(d, _rp_dir(slug, line2), d, err(f"{d}/{T}", 2, fld, problem), slug))
    table_bad = [
        (
            "table-duplicate-id",
            "2_passages.jsonl",
            lines('{"passage_id": 10, "token_length": 100}', '{"passage_id": 10, "token_length": 7}'),
            2,
            "passage_id",
            "duplicate id 10 (first at line 1)",
        ),
        (
            "table-zero-length",
            "3_history.jsonl",
            lines('{"history_id": 20, "token_length": 0}'),
            1,
            "token_length",
            "must be >= 1",
        ),
        (
            "table-bad-json",
            "4_user_input.jsonl",
            lines('{"user_input_id": 30, "token_length": 5}', "{oops"),
            2,
            None,
            "invalid JSON",
        ),
        (
            "table-missing-id",
            "5_web_search.jsonl",
            lines('{"token_length": 16}'),
            1,
            "web_search_id",
            "missing",
        ),
        (
            "table-negative-id",
            "1_sys_prompt.jsonl",
            lines('{"sys_prompt_id": -1, "token_length": 64}'),
            1,
            "sys_prompt_id",
            "must be >= 0",
        ),
        ("table-empty", "5_web_search.jsonl", b"", None, None, "empty trace"),
    ]
    line2 = _rp_line(_rp())
    for slug, fname, data, line, fld, problem in table_bad:
        d = f"ragpulse-{slug}"
        cases.append(
            Case(d, _rp_dir(slug, line2, {fname: data}), d, err(f"{d}/{fname}", line, fld, problem), slug)
        )
    d = "ragpulse-table-missing"
    cases.append(
        Case(
            d,
            _rp_dir("table-missing", line2, drop="3_history.jsonl"),
            d,
            err(f"{d}/{T}", None, None, "RAGPulse component table 3_history.jsonl not found"),
            "no history table",
        )
    )
    ok = result(3, 180 + 200 + 190, 12)
    for slug, line2v, expect, desc in (
        ("valid", line2, ok, "a valid RAGPulse directory"),
        (
            "unsorted",
            _rp_line(_rp('"0"')),
            result(3, 570, 12, "timestamps are not sorted"),
            "string timestamps out of order",
        ),
        (
            "segments-too-long",
            _rp_line(_rp(n_in=100)),
            result(3, 180 + 100 + 190, 12, "longer than input_length"),
            "segments exceed input_length",
        ),
    ):
        d = f"ragpulse-{slug}"
        cases.append(Case(d, _rp_dir(slug, line2v), d, expect, desc))
    d = "ragpulse-trace-file"
    files = _rp_dir("trace-file", line2)
    cases.append(Case(d, files, f"{d}/{T}", ok, "the trace file itself, tables beside it"))
    d = "not-ragpulse-dir"
    cases.append(
        Case(
            d,
            {f"{d}/README": b"not a trace\n"},
            d,
            err(d, None, None, "a directory, but no RAGPulse 0_trace.jsonl inside"),
            "a directory without a trace",
        )
    )
    d = "ragpulse-as-mooncake"
    cases.append(
        Case(
            d,
            _rp_dir("as-mooncake", line2),
            d,
            err(d, None, None, "a directory (a RAGPulse trace), so --format mooncake"),
            "--format on a dir",
            args=["--format", "mooncake"],
        )
    )
    return cases
