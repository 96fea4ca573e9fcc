"""Parquet, compression and encoding wrappers, binary garbage, standard input, and op logs."""

from __future__ import annotations

import bz2
import io
import json
import lzma
import zipfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from cases_jsonl import DY1, DY3, MC1, MC3, MC_TOTALS, TK1, TK3, _dy2, _mc2, _tk2
from cases_tables import AZ1, AZ3, AZ_HEADER
from corpus import Case, err, gz, lines, prng_bytes, result, zipped

# --- parquet ---------------------------------------------------------------------------------------
_REQ = {
    "rid": ["1", "2", "3"],
    "arrival_s": [0.0, 0.01, 0.02],
    "session_id": ["1", "1", "3"],
    "turn": [0, 1, 0],
    "parent": [-1, 0, -1],
    "prompt_len": [600, 1200, 100],
    "output_len": [5, 7, 3],
}
_BLOCKS = {
    "chain_ids": [[0, 1, 2], [0, 1, 3, 4], [5, 6]],
    "block_lens": [[512, 88, 5], [512, 88, 600, 7], [100, 3]],
}
_TOKENS_REQ = {**_REQ, "prompt_len": [4, 6, 2], "output_len": [2, 1, 1]}
_TOKENS = {"tokens": [[1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6, 7], [8, 9, 10]]}
_META = {
    "kvplan.format_version": "1",
    "kvplan.content": "blocks",
    "kvplan.source": "corpus",
    "kvplan.closed_loop": "null",
}
_INT = {"turn": pa.int32(), "parent": pa.int64(), "prompt_len": pa.int64(), "output_len": pa.int64()}


def parquet_bytes(columns: dict, meta: dict, types: dict | None = None) -> bytes:
    """A parquet file of these columns and ``kvplan.*`` metadata (``None`` drops a key)."""
    types = {**_INT, **(types or {})}
    arrays = {}
    for name, values in columns.items():
        if name in ("chain_ids", "block_lens", "tokens"):
            arrays[name] = pa.array(values, types.get(name, pa.large_list(pa.int64())))
        else:
            arrays[name] = pa.array(values, types.get(name))
    table = pa.table(arrays)
    md = {k.encode(): v if isinstance(v, bytes) else v.encode() for k, v in meta.items() if v is not None}
    buf = io.BytesIO()
    pq.write_table(table.replace_schema_metadata(md), buf, compression="none")
    return buf.getvalue()


def _pq(
    slug: str,
    expect: dict,
    desc: str,
    req: dict | None = None,
    content: dict | None = None,
    meta: dict | None = None,
    types: dict | None = None,
    tokens: bool = False,
    **kw,
) -> Case:
    base_req, base_content = (_TOKENS_REQ, _TOKENS) if tokens else (_REQ, _BLOCKS)
    cols = {**base_req, **(req or {}), **(content if content is not None else base_content)}
    if content is not None and "drop" in content:
        cols = {k: v for k, v in cols.items() if k not in content["drop"] and k != "drop"}
    md = {**_META, **({"kvplan.content": "tokens"} if tokens else {}), **(meta or {})}
    name = f"parquet-{slug}.parquet"
    return Case(name, {name: parquet_bytes(cols, md, types)}, name, expect, desc, **kw)


def _row(slug: str, row: int, fld: str, problem: str) -> dict:
    return {"error": f"parquet-{slug}.parquet row {row}: field '{fld}': {problem}"}


def parquet_cases() -> list[Case]:
    P = "parquet-"
    c = [
        _pq("valid-blocks", result(3, 1900, 15), "a valid block trace"),
        _pq("valid-tokens", result(3, 12, 4), "a valid token trace", tokens=True),
        _pq(
            "huge-chain-ids",
            result(3, 1900, 15),
            "chain ids of a foreign file",
            content={**_BLOCKS, "chain_ids": [[2**40, 2**41, 2**42], [2**40, 2**41, 3, 4], [5, 2**62]]},
        ),
        _pq(
            "version-2-client-columns",
            result(3, 12, 4),
            "format 2 with max_new_tokens / ignore_eos (nulls: not sent)",
            tokens=True,
            req={"max_new_tokens": [20, None, 1], "ignore_eos": [False, None, True]},
            meta={"kvplan.format_version": "2"},
        ),
        _pq(
            "max-new-tokens-zero",
            _row("max-new-tokens-zero", 2, "max_new_tokens", "must be >= 1, got 0"),
            "max_new_tokens 0",
            tokens=True,
            req={"max_new_tokens": [20, None, 0]},
            meta={"kvplan.format_version": "2"},
        ),
        _pq(
            "max-new-tokens-text",
            err(P + "max-new-tokens-text.parquet", None, "max_new_tokens", "must be an integer column"),
            "max_new_tokens strings",
            tokens=True,
            req={"max_new_tokens": ["20", "1", "1"]},
            types={"max_new_tokens": pa.string()},
            meta={"kvplan.format_version": "2"},
        ),
        _pq(
            "ignore-eos-int",
            err(P + "ignore-eos-int.parquet", None, "ignore_eos", "must be a boolean column, got int64"),
            "ignore_eos integers",
            tokens=True,
            req={"ignore_eos": [1, 0, 1]},
            meta={"kvplan.format_version": "2"},
        ),
        _pq(
            "version-99",
            err(P + "version-99.parquet", None, "kvplan.format_version", "unknown version '99'"),
            "format_version 99",
            meta={"kvplan.format_version": "99"},
        ),
        _pq(
            "version-missing",
            err(P + "version-missing.parquet", None, "kvplan.format_version", "unknown version none"),
            "no format_version",
            meta={"kvplan.format_version": None},
        ),
        _pq(
            "content-missing",
            err(P + "content-missing.parquet", None, None, "not a kvplan trace"),
            "no kvplan.content",
            meta={"kvplan.content": None},
        ),
        _pq(
            "content-unknown",
            err(P + "content-unknown.parquet", None, None, "not a kvplan trace"),
            "content 'pages'",
            meta={"kvplan.content": "pages"},
        ),
        _pq(
            "content-not-utf8",
            err(P + "content-not-utf8.parquet", None, None, "not a kvplan trace"),
            "metadata bytes not UTF-8",
            meta={"kvplan.content": b"\xff\xfe"},
        ),
        _pq(
            "closed-loop-garbage",
            err(P + "closed-loop-garbage.parquet", None, "kvplan.closed_loop", ""),
            "closed_loop metadata not JSON",
            meta={"kvplan.closed_loop": "{oops"},
        ),
        _pq(
            "closed-loop-unknown",
            err(P + "closed-loop-unknown.parquet", None, "kvplan.closed_loop", ""),
            "closed_loop of an unknown kind",
            meta={"kvplan.closed_loop": '{"kind": "warp"}'},
        ),
        _pq(
            "closed-loop-list",
            err(P + "closed-loop-list.parquet", None, "kvplan.closed_loop", ""),
            "closed_loop a JSON list",
            meta={"kvplan.closed_loop": "[1, 2]"},
        ),
        _pq(
            "no-prompt-len",
            err(P + "no-prompt-len.parquet", None, "prompt_len", "missing column"),
            "no prompt_len column",
            content={**_BLOCKS, "drop": ["prompt_len"]},
        ),
        _pq(
            "no-chain-ids",
            err(P + "no-chain-ids.parquet", None, "chain_ids", "missing column"),
            "no chain_ids column",
            content={"block_lens": _BLOCKS["block_lens"]},
        ),
        _pq(
            "prompt-len-zero",
            _row("prompt-len-zero", 1, "prompt_len", "must be >= 1, got 0"),
            "prompt_len 0",
            req={"prompt_len": [600, 0, 100]},
        ),
        _pq(
            "prompt-len-negative",
            _row("prompt-len-negative", 2, "prompt_len", "must be >= 1, got -100"),
            "prompt_len < 0",
            req={"prompt_len": [600, 1200, -100]},
        ),
        _pq(
            "prompt-len-nan",
            _row("prompt-len-nan", 1, "prompt_len", "missing value"),
            "prompt_len NaN",
            req={"prompt_len": [600.0, float("nan"), 100.0]},
            types={"prompt_len": pa.float64()},
        ),
        _pq(
            "prompt-len-null",
            _row("prompt-len-null", 0, "prompt_len", "missing value"),
            "prompt_len null",
            req={"prompt_len": [None, 1200, 100]},
        ),
        _pq(
            "prompt-len-fraction",
            _row("prompt-len-fraction", 1, "prompt_len", "must be an integer"),
            "prompt_len 1200.5",
            req={"prompt_len": [600.0, 1200.5, 100.0]},
            types={"prompt_len": pa.float64()},
        ),
        _pq(
            "prompt-len-text",
            err(P + "prompt-len-text.parquet", None, "prompt_len", "must be a numeric column"),
            "prompt_len strings",
            req={"prompt_len": ["600", "1200", "100"]},
            types={"prompt_len": pa.string()},
        ),
        _pq(
            "prompt-len-bool",
            err(P + "prompt-len-bool.parquet", None, "prompt_len", "must be a numeric column"),
            "prompt_len booleans",
            req={"prompt_len": [True, True, True]},
            types={"prompt_len": pa.bool_()},
        ),
        _pq(
            "prompt-len-over-max",
            _row("prompt-len-over-max", 1, "prompt_len", "must be <= 1,073,741,824"),
            "prompt_len 2**31",
            req={"prompt_len": [600, 2**31, 100]},
        ),
        _pq(
            "prompt-len-float-huge",
            _row("prompt-len-float-huge", 1, "prompt_len", "must be <= 1,073,741,824"),
            "prompt_len 1e300",
            req={"prompt_len": [600.0, 1e300, 100.0]},
            types={"prompt_len": pa.float64()},
        ),
        _pq(
            "prompt-len-disagrees",
            _row(
                "prompt-len-disagrees",
                1,
                "block_lens",
                "holds 1207 tokens but prompt_len + output_len = 1107",
            ),
            "prompt_len vs content",
            req={"prompt_len": [600, 1100, 100]},
        ),
        _pq(
            "output-len-zero",
            _row("output-len-zero", 2, "output_len", "must be >= 1, got 0"),
            "output_len 0",
            req={"output_len": [5, 7, 0]},
        ),
        _pq(
            "parent-out-of-range",
            _row("parent-out-of-range", 1, "parent", "must be -1 or an earlier row, got 5"),
            "parent 5 of 3 rows",
            req={"parent": [-1, 5, -1]},
        ),
        _pq(
            "parent-self",
            _row("parent-self", 1, "parent", "must be -1 or an earlier row, got 1"),
            "a row its own parent",
            req={"parent": [-1, 1, -1]},
        ),
        _pq(
            "parent-later",
            _row("parent-later", 0, "parent", "must be -1 or an earlier row, got 2"),
            "parent after child",
            req={"parent": [2, 0, -1]},
        ),
        _pq(
            "parent-below-minus-one",
            _row("parent-below-minus-one", 2, "parent", "must be >= -1, got -7"),
            "parent -7",
            req={"parent": [-1, 0, -7]},
        ),
        _pq(
            "turn-negative",
            _row("turn-negative", 0, "turn", "must be >= 0, got -1"),
            "turn -1",
            req={"turn": [-1, 1, 0]},
        ),
        _pq(
            "rid-empty",
            _row("rid-empty", 1, "rid", "must be a non-empty string"),
            "rid ''",
            req={"rid": ["1", "", "3"]},
        ),
        _pq(
            "rid-null",
            _row("rid-null", 2, "rid", "must be a non-empty string"),
            "rid null",
            req={"rid": ["1", "2", None]},
        ),
        _pq(
            "rid-duplicate",
            _row("rid-duplicate", 2, "rid", "duplicate rid '1' (first at row 0)"),
            "rid twice",
            req={"rid": ["1", "2", "1"]},
        ),
        _pq(
            "arrival-inf",
            _row("arrival-inf", 1, "arrival_s", "must be finite"),
            "arrival inf",
            req={"arrival_s": [0.0, float("inf"), 0.02]},
        ),
        _pq(
            "arrival-text",
            err(P + "arrival-text.parquet", None, "arrival_s", "must be a numeric column"),
            "arrival strings",
            req={"arrival_s": ["0", "1", "2"]},
        ),
        _pq(
            "chain-negative",
            _row("chain-negative", 1, "chain_ids", "must be >= 0, got -4"),
            "chain id -4",
            content={**_BLOCKS, "chain_ids": [[0, 1, 2], [0, 1, 3, -4], [5, 6]]},
        ),
        _pq(
            "block-len-zero",
            _row("block-len-zero", 2, "block_lens", "must be >= 1, got 0"),
            "block length 0",
            content={**_BLOCKS, "block_lens": [[512, 88, 5], [512, 88, 600, 7], [103, 0]]},
        ),
        _pq(
            "block-count-mismatch",
            _row("block-count-mismatch", 0, "block_lens", "needs one length per chain id"),
            "lists of unequal length",
            content={**_BLOCKS, "block_lens": [[512, 93], [512, 88, 600, 7], [100, 3]]},
        ),
        _pq(
            "null-list",
            _row("null-list", 1, "chain_ids", "missing list"),
            "a null list",
            content={**_BLOCKS, "chain_ids": [[0, 1, 2], None, [5, 6]]},
        ),
        _pq(
            "null-in-list",
            _row("null-in-list", 2, "block_lens", "missing value inside the list"),
            "a null block length",
            content={**_BLOCKS, "block_lens": [[512, 88, 5], [512, 88, 600, 7], [100, None]]},
        ),
        _pq(
            "chain-not-list",
            err(P + "chain-not-list.parquet", None, "chain_ids", "must be a list column"),
            "chain_ids an int column",
            content={**_BLOCKS, "chain_ids": [0, 1, 2]},
            types={"chain_ids": pa.int64()},
        ),
        _pq(
            "chain-strings",
            err(P + "chain-strings.parquet", None, "chain_ids", "must hold integers"),
            "chain_ids of strings",
            content={**_BLOCKS, "chain_ids": [["a", "b", "c"], ["a", "b", "d", "e"], ["f", "g"]]},
            types={"chain_ids": pa.large_list(pa.string())},
        ),
        _pq(
            "tokens-truncated",
            _row("tokens-truncated", 1, "tokens", "holds 5 tokens but prompt_len + output_len = 7"),
            "a token list cut short",
            tokens=True,
            content={"tokens": [[1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5], [8, 9, 10]]},
        ),
        _pq(
            "tokens-negative",
            _row("tokens-negative", 0, "tokens", "must be in [0, 2147483647], got -1"),
            "token id -1",
            tokens=True,
            content={"tokens": [[1, 2, 3, 4, 5, -1], [1, 2, 3, 4, 5, 6, 7], [8, 9, 10]]},
        ),
        _pq(
            "tokens-over-int32",
            _row("tokens-over-int32", 2, "tokens", "must be in [0, 2147483647], got 2147483648"),
            "token id 2**31",
            tokens=True,
            content={"tokens": [[1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6, 7], [8, 9, 2**31]]},
        ),
        _pq(
            "zero-rows",
            err(P + "zero-rows.parquet", None, None, "empty trace: no records"),
            "a file without rows",
            req={k: [] for k in _REQ},
            content={"chain_ids": [], "block_lens": []},
        ),
        _pq(
            "as-mooncake",
            err(P + "as-mooncake.parquet", None, None, "a parquet file, not mooncake"),
            "--format mooncake on parquet",
            args=["--format", "mooncake"],
        ),
        _pq(
            "as-azure",
            err(P + "as-azure.parquet", None, None, "a parquet file, not azure"),
            "--format azure on parquet",
            args=["--format", "azure"],
        ),
    ]
    good = parquet_bytes({**_REQ, **_BLOCKS}, _META)
    for slug, data, problem in (
        ("truncated", good[: len(good) // 2], "not a readable parquet file"),
        ("magic-only", b"PAR1", "not a readable parquet file"),
        ("magic-garbage", b"PAR1" + prng_bytes(7, 300) + b"PAR1", "not a readable parquet file"),
        ("no-footer-magic", good[:-4], "not a readable parquet file"),
    ):
        name = f"parquet-{slug}.parquet"
        c.append(Case(name, {name: data}, name, err(name, None, None, problem), f"broken parquet: {slug}"))
    name = "parquet-named-jsonl.jsonl"
    c.append(
        Case(
            name,
            {name: good},
            name,
            result(3, 1900, 15),
            "a parquet file with a .jsonl name (magic bytes decide)",
        )
    )
    return c


# --- compression, encodings, garbage ----------------------------------------------------------------
MC_FILE = lines(MC1, _mc2(), MC3)
MC_OK = result(3, *MC_TOTALS)


# `trace head` reads 10 records and stops, before the cut at line 62: a correct read of those rows.
HEAD_BEFORE_THE_CUT = {
    "trace head": result(10, 4 * 600 + 3 * 1200 + 3 * 100, 4 * 5 + 3 * 7 + 3 * 3, "not sorted")
}


def wrapper_cases() -> list[Case]:
    bad_line2 = lines(MC1, _mc2(n_in="0"), MC3)
    specs: list[tuple[str, bytes, dict, str]] = [
        ("mooncake.jsonl.gz", gz(MC_FILE), MC_OK, "gzip"),
        ("mooncake-no-gz-suffix.jsonl", gz(MC_FILE), MC_OK, "gzip without a .gz name"),
        ("tokens.jsonl.gz", gz(lines(TK1, _tk2(), TK3)), result(3, 13, 4), "gzip token JSONL"),
        ("azure.csv.gz", gz(lines(AZ_HEADER, AZ1, AZ3)), result(2, 474, 54), "gzip Azure CSV"),
        ("dynamo.jsonl.gz", gz(lines(DY1, _dy2(), DY3)), result(3, 65, 9), "gzip Dynamo events"),
        (
            "gzip-bad-line2.jsonl.gz",
            gz(bad_line2),
            err("gzip-bad-line2.jsonl.gz", 2, "input_length", "must be >= 1"),
            "gzip with a bad record",
        ),
        (
            "gzip-garbage-after.jsonl.gz",
            gz(MC_FILE) + b"garbage!",
            err("gzip-garbage-after.jsonl.gz", 4, None, "corrupt gzip"),
            "bytes after the gzip member",
        ),
        (
            "gzip-truncated.jsonl.gz",
            gz(MC_FILE * 40)[:-30],
            err("gzip-truncated.jsonl.gz", 62, None, "corrupt gzip"),
            "gzip cut short",
        ),
        (
            "gzip-header-only.jsonl.gz",
            gz(MC_FILE)[:10],
            err("gzip-header-only.jsonl.gz", 1, None, "corrupt gzip"),
            "a gzip header alone",
        ),
        (
            "gzip-magic-garbage.jsonl.gz",
            b"\x1f\x8b" + prng_bytes(3, 200),
            err("gzip-magic-garbage.jsonl.gz", 1, None, "corrupt gzip"),
            "gzip magic then noise",
        ),
        (
            "gzip-empty.jsonl.gz",
            gz(b""),
            err("gzip-empty.jsonl.gz", None, None, "empty trace"),
            "gzip of nothing",
        ),
        (
            "gzip-twice.jsonl.gz",
            gz(gz(MC_FILE)),
            err("gzip-twice.jsonl.gz", 1, None, "not UTF-8"),
            "gzip of gzip",
        ),
        (
            "gzip-bad-crc.jsonl.gz",
            gz(MC_FILE)[:-8] + b"\x00\x00\x00\x00" + gz(MC_FILE)[-4:],
            err("gzip-bad-crc.jsonl.gz", 4, None, "corrupt gzip"),
            "a wrong CRC",
        ),
        (
            "gzip-non-utf8.jsonl.gz",
            gz(MC_FILE + b'{"timestamp": "\xff"}\n'),
            err("gzip-non-utf8.jsonl.gz", 4, None, "not UTF-8"),
            "gzip of invalid UTF-8",
        ),
        (
            "mooncake.jsonl.bz2",
            bz2.compress(MC_FILE),
            err("mooncake.jsonl.bz2", None, None, "the input is bz2-compressed"),
            "bz2",
        ),
        (
            "mooncake.jsonl.xz",
            lzma.compress(MC_FILE),
            err("mooncake.jsonl.xz", None, None, "the input is xz-compressed"),
            "xz",
        ),
        (
            "mooncake.jsonl.zst",
            b"\x28\xb5\x2f\xfd" + prng_bytes(5, 64),
            err("mooncake.jsonl.zst", None, None, "the input is zstd-compressed"),
            "zstd",
        ),
        (
            "mooncake.jsonl.zip",
            zipped("mooncake.jsonl", MC_FILE),
            err("mooncake.jsonl.zip", None, None, "the input is a zip archive"),
            "zip",
        ),
        (
            "utf16-le.jsonl",
            MC_FILE.decode().encode("utf-16"),
            err("utf16-le.jsonl", None, None, "the input is UTF-16 text"),
            "UTF-16 with a BOM",
        ),
        (
            "utf16-be.jsonl",
            b"\xfe\xff" + MC_FILE.decode().encode("utf-16-be"),
            err("utf16-be.jsonl", None, None, "the input is UTF-16 text"),
            "UTF-16 big-endian",
        ),
        (
            "utf16-no-bom.jsonl",
            MC_FILE.decode().encode("utf-16-le"),
            err("utf16-no-bom.jsonl", 1, None, "binary data"),
            "UTF-16 without a BOM",
        ),
        (
            "utf32.jsonl",
            MC_FILE.decode().encode("utf-32"),
            err("utf32.jsonl", None, None, "the input is UTF-32 text"),
            "UTF-32",
        ),
        (
            "latin1.jsonl",
            MC1.encode() + b"\n" + _mc2()[:-1].encode() + ', "note": "caf\xe9"}\n'.encode("latin-1"),
            err("latin1.jsonl", 2, None, "not UTF-8"),
            "Latin-1 text",
        ),
        (
            "utf8-surrogate.jsonl",
            MC1.encode() + b'\n{"timestamp": "\xed\xa0\x80"}\n',
            err("utf8-surrogate.jsonl", 2, None, "not UTF-8"),
            "an encoded surrogate",
        ),
        (
            "utf8-overlong.jsonl",
            MC1.encode() + b'\n{"x": "\xc0\xaf"}\n',
            err("utf8-overlong.jsonl", 2, None, "not UTF-8"),
            "an overlong encoding",
        ),
        (
            "nul-line2.jsonl",
            MC1.encode() + b"\n\x00\x01\x02\x03\n",
            err("nul-line2.jsonl", 2, None, "binary data"),
            "NUL bytes",
        ),
        (
            "nul-in-json.jsonl",
            MC1.encode() + b'\n{"timestamp": 1\x00}\n',
            err("nul-in-json.jsonl", 2, None, "binary data"),
            "a NUL inside JSON",
        ),
        ("random-bytes.bin", prng_bytes(1, 4096), err("random-bytes.bin", None, None, ""), "4 KiB of noise"),
        ("zeros.bin", b"\x00" * 1024, err("zeros.bin", 1, None, "binary data"), "NUL bytes only"),
        (
            "elf.bin",
            b"\x7fELF\x02\x01\x01" + b"\x00" * 57,
            err("elf.bin", 1, None, ""),
            "an executable header",
        ),
        (
            "png.bin",
            b"\x89PNG\r\n\x1a\n" + prng_bytes(9, 100),
            err("png.bin", 1, None, "not UTF-8"),
            "an image",
        ),
        ("one-byte-ff.bin", b"\xff", err("one-byte-ff.bin", 1, None, "not UTF-8"), "one invalid byte"),
        (
            "bom-then-garbage.jsonl",
            b"\xef\xbb\xbf\xff\xfe\n",
            err("bom-then-garbage.jsonl", 1, None, "not UTF-8"),
            "a BOM then invalid bytes",
        ),
        (
            "long-line.jsonl",
            lines(MC1, '{"timestamp": 10, "x": "' + "a" * 300_000 + '"}'),
            err("long-line.jsonl", 2, "input_length", "missing"),
            "a 300 kB line",
        ),
    ]
    cases = [Case(n, {n: d}, n, e, desc) for n, d, e, desc in specs]
    cases[[c.id for c in cases].index("gzip-truncated.jsonl.gz")].per_command = HEAD_BEFORE_THE_CUT
    cases.append(
        Case(
            "does-not-exist.jsonl",
            {},
            "does-not-exist.jsonl",
            err("does-not-exist.jsonl", None, None, "no such file"),
            "a missing path",
        )
    )
    return cases


def stdin_cases() -> list[Case]:
    """Inputs given as ``-`` (standard input), read in process through the test runner's stdin."""
    specs: list[tuple[str, bytes, dict, str]] = [
        ("stdin-mooncake.jsonl", MC_FILE, MC_OK, "plain text on stdin"),
        ("stdin-gzip.jsonl.gz", gz(MC_FILE), MC_OK, "gzip on stdin"),
        (
            "stdin-truncated.jsonl.gz",
            gz(MC_FILE * 40)[:-30],
            err("<stdin>", 62, None, "corrupt gzip"),
            "truncated gzip on stdin",
        ),
        (
            "stdin-bad-line2.jsonl",
            lines(MC1, _mc2(n_out="-1"), MC3),
            err("<stdin>", 2, "output_length", "must be >= 1"),
            "bad record on stdin",
        ),
        (
            "stdin-parquet.parquet",
            parquet_bytes({**_REQ, **_BLOCKS}, _META),
            result(3, 1900, 15),
            "parquet on stdin",
        ),
        ("stdin-empty.jsonl", b"", err("<stdin>", None, None, "empty trace"), "nothing on stdin"),
        (
            "stdin-bz2.jsonl.bz2",
            bz2.compress(MC_FILE),
            err("<stdin>", None, None, "the input is bz2-compressed"),
            "bz2 on stdin",
        ),
        ("stdin-azure.csv", lines(AZ_HEADER, AZ1, AZ3), result(2, 474, 54), "Azure CSV on stdin"),
    ]
    cases = [Case(n, {n: d}, n, e, desc, via="stdin") for n, d, e, desc in specs]
    cases[[c.id for c in cases].index("stdin-truncated.jsonl.gz")].per_command = HEAD_BEFORE_THE_CUT
    return cases


# --- op logs (kvplan ops stats) ----------------------------------------------------------------------
def _npz(arrays: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, arr in arrays.items():
            member = io.BytesIO()
            np.lib.format.write_array(member, np.asarray(arr), allow_pickle=True)
            z.writestr(zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0)), member.getvalue())
    return buf.getvalue()


def oplog_cases() -> list[Case]:
    header = {
        "format": "kvplan-oplog",
        "version": 1,
        "page_size": 1,
        "full_pages": 8,
        "swa_pages": 8,
        "need_sort": False,
    }
    specs: list[tuple[str, bytes, str]] = [
        ("garbage", prng_bytes(11, 512), "not an npz op log"),
        ("empty", b"", "not an npz op log"),
        ("text", MC_FILE, "not an npz op log"),
        ("no-header", _npz({"op_kind": np.zeros(1, np.int64)}), "field 'header': missing"),
        ("header-not-json", _npz({"header": np.array("{oops")}), "field 'header': not JSON"),
        ("header-number", _npz({"header": np.array("5")}), "field 'header'"),
        ("header-list", _npz({"header": np.array("[1, 2]")}), "field 'header"),
        (
            "wrong-format",
            _npz({"header": np.array(json.dumps({**header, "format": "other"}))}),
            "field 'header.format'",
        ),
        (
            "version-99",
            _npz({"header": np.array(json.dumps({**header, "version": 99}))}),
            "field 'header.version'",
        ),
        (
            "page-size-zero",
            _npz({"header": np.array(json.dumps({**header, "page_size": 0}))}),
            "field 'header.page_size'",
        ),
        ("missing-arrays", _npz({"header": np.array(json.dumps(header))}), "field 'op_kind': missing"),
        ("pickled", _npz({"header": np.array([{"a": 1}], dtype=object)}), "not an npz op log"),
    ]
    out = []
    for slug, data, problem in specs:
        name = f"oplog-{slug}.npz"
        out.append(
            Case(
                name,
                {name: data},
                name,
                {"error": f"{name}: {problem}"},
                f"op log: {slug}",
                commands=["ops stats"],
            )
        )
    return out
