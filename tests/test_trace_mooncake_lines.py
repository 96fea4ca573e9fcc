"""traces/readers/mooncake_lines.py scans Mooncake lines into the arrays json + plain_chunk give.

The scanner may refuse a line (the reader then parses its chunk with json: the same values or
the located error), but a line it accepts must give exactly json's values. Both the module as
imported (the compiled build where it is built) and its .py source run the same cases.
"""

from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path

import numpy as np
import pytest

import traces.readers.mooncake as mooncake
import traces.readers.mooncake_lines as imported
from traces import load_trace
from traces.jsonl_chunks import iter_line_chunks
from traces.readers.mooncake_chunks import plain_chunk

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "traces" / "data"


def _source_module():
    """The .py itself, whatever build the import loads."""
    path = ROOT / "traces" / "readers" / "mooncake_lines.py"
    spec = importlib.util.spec_from_file_location("_mooncake_lines_source", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SOURCE = _source_module()
SCANNERS = [pytest.param(SOURCE, id="source"), pytest.param(imported, id="imported")]


def _reference(lines: list[tuple[int, str]], block_size: int) -> tuple | None:
    """json + plain_chunk's arrays for lines of the four keys only, else None."""
    objs = []
    for _, text in lines:
        if text[:1] != "{":
            return None
        try:
            obj, end = json.JSONDecoder().raw_decode(text)
        except ValueError:
            return None
        if text[end:] not in ("", "\n", "\r\n") or not isinstance(obj, dict):
            return None
        if set(obj) != {"timestamp", "input_length", "output_length", "hash_ids"}:
            return None
        objs.append(obj)
    plain = plain_chunk(objs, block_size)
    return None if plain is None else (np.array([n for n, _ in lines], dtype=np.int64), *plain)


def _same(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(
        x.dtype == y.dtype and x.tobytes() == y.tobytes() for x, y in zip(a, b, strict=True)
    )


_NUMBERS = ["0", "-0", "1", "12", "007", "1.5", "-1.5", "1e3", "1E+3", "1e-3", "2.", ".5", "1.0e400",
            "-", "9" * 18, "9" * 19, "9223372036854775807", "9223372036854775808",
            "-9223372036854775808", "-9223372036854775809", "1" * 25, "true", "false", "null",
            '"5"', "NaN", "Infinity", "[]", "1073741824", "1073741825", "0.1",
            "123456789012345678.5", "1_0"]  # fmt: skip
_WS = ["", " ", "  ", "\t", "\r", "\n"]
_ESCAPED_KEY = "times\\u0074amp"  # json reads it as "timestamp": a second one


def _ids(rng: random.Random, n: int) -> str:
    values = [str(rng.randrange(0, 10 ** rng.choice([1, 3, 9, 18]))) for _ in range(n)]
    if values and rng.random() < 0.2:
        values[rng.randrange(n)] = rng.choice(_NUMBERS)
    seps = [rng.choice(_WS) + "," + rng.choice(_WS) if rng.random() < 0.3 else ", " for _ in values[1:]]
    body = values[0] + "".join(s + v for s, v in zip(seps, values[1:], strict=True)) if values else ""
    return "[" + rng.choice(_WS) + body + rng.choice(_WS) + "]"


def _line(rng: random.Random, block_size: int) -> str:
    """A Mooncake line, now and then with a field, a separator or the line end out of the plain."""
    n_in = rng.choice([1, 5, 511, 512, 513, 4372, 0])
    n_ids = -(-n_in // block_size) if rng.random() < 0.9 else rng.randrange(0, 4)
    odd = lambda: rng.random() < 0.1  # noqa: E731
    timestamp = rng.choice([str(rng.randrange(10**7)), repr(rng.random() * 1e6)])
    fields = {
        "timestamp": rng.choice(_NUMBERS) if odd() else timestamp,
        "input_length": rng.choice(_NUMBERS) if odd() else str(n_in),
        "output_length": rng.choice(_NUMBERS) if odd() else str(rng.randrange(1, 3000)),
        "hash_ids": rng.choice(_NUMBERS) if rng.random() < 0.05 else _ids(rng, n_ids),
    }
    keys = list(fields)
    if rng.random() < 0.3:
        rng.shuffle(keys)
    parts = [f'"{k}"{rng.choice(_WS) if odd() else ""}:{rng.choice(_WS)}{fields[k]}' for k in keys]
    if rng.random() < 0.05:
        parts.append(f'"{rng.choice([*keys, "extra", _ESCAPED_KEY])}": 1')
    if rng.random() < 0.03:
        parts.pop(rng.randrange(len(parts)))
    text = rng.choice(_WS) if rng.random() < 0.05 else ""
    text += "{" + ", ".join(parts) + "}" + rng.choice(["\n"] * 8 + ["", "\r\n", " \n", "x\n"])
    if rng.random() < 0.02:
        k = rng.randrange(len(text))
        text = text[:k] + rng.choice(["é", "\x0b", "}", "{", ",", '"']) + text[k:]
    return text


@pytest.mark.parametrize("scanner", SCANNERS)
@pytest.mark.parametrize("seed", range(6))
def test_scanned_lines_are_json_values(scanner, seed: int) -> None:
    rng = random.Random(seed)
    accepted = 0
    for _ in range(250):
        block_size = rng.choice([1, 7, 512])
        lines = [(2 * k + 1, _line(rng, block_size)) for k in range(rng.choice([1, 1, 2, 5]))]
        got = scanner.scan_lines(lines, block_size)
        if got is not None:
            want = _reference(lines, block_size)
            assert want is not None and _same(got, want), lines
            accepted += 1
    assert accepted > 20  # the corpus is mostly plain


@pytest.mark.parametrize("scanner", SCANNERS)
def test_json_dumps_lines_are_scanned(scanner) -> None:
    """What json.dumps writes (the generator's and Mooncake's own files) takes the fast path."""
    rng = random.Random(1)
    records = [
        {
            "timestamp": t,
            "input_length": n,
            "output_length": 3,
            "hash_ids": [rng.randrange(2**63) for _ in range(-(-n // 16))],
        }
        for t, n in [(0, 1), (17, 16), (2.5, 17), (-0.0, 100), (1e-7, 5), (123456789012, 999)]
    ]
    lines = [(k + 1, json.dumps(r) + "\n") for k, r in enumerate(records)]
    got = scanner.scan_lines(lines, 16)
    assert got is not None and _same(got, _reference(lines, 16))
    assert got[1].tolist() == [0.0, 17.0, 2.5, -0.0, 1e-7, 123456789012.0]


@pytest.mark.parametrize("name", ["mooncake_arxiv_head800.jsonl"])
def test_samples_are_scanned(name: str) -> None:
    chunks = list(iter_line_chunks(DATA / name))
    assert all(SOURCE.scan_lines(c, 512) is not None for c in chunks)


def test_compiled_build_scans(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reader scans lines exactly when the scanner is compiled, and reads the same trace."""
    assert mooncake.SCAN_LINES == imported.COMPILED
    calls = []
    monkeypatch.setattr(mooncake, "parse_records", lambda *a: calls.append(a))
    monkeypatch.setattr(mooncake, "SCAN_LINES", True)
    scanned = load_trace(DATA / "mooncake_arxiv_head800.jsonl")
    assert calls == []
    monkeypatch.setattr(mooncake, "SCAN_LINES", False)
    parsed = load_trace(DATA / "mooncake_arxiv_head800.jsonl")
    for column in ("arrival_s", "turn", "parent", "prompt_len", "output_len"):
        assert scanned.column(column).tobytes() == parsed.column(column).tobytes()
