#!/usr/bin/env python3
"""Write the bad-input corpus: one file (or RAGPulse directory) per input case under ``cases/``,
``cases/inputs.json`` (each case's target, extra flags, commands and expected outcome) and
``cases/flags.json`` (bad flag values with the error each must give).

Deterministic: running it again writes the same bytes (tests/test_bad_input_corpus.py checks it).
Usage: ``python tests/bad_input/generate.py [OUT_DIR]`` (default: ``tests/bad_input/cases``).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from cases_binary import oplog_cases, parquet_cases, stdin_cases, wrapper_cases  # noqa: E402
from cases_flags import flag_cases  # noqa: E402
from cases_jsonl import dynamo_cases, mooncake_cases, token_cases  # noqa: E402
from cases_tables import azure_cases, ragpulse_cases  # noqa: E402
from corpus import Case  # noqa: E402

DEFAULT_OUT = HERE / "cases"
#: The small valid trace the flag cases run against ({trace}).
FLAG_TRACE = "mooncake-one-record.jsonl"


def input_cases() -> list[Case]:
    cases = (
        mooncake_cases()
        + token_cases()
        + dynamo_cases()
        + azure_cases()
        + ragpulse_cases()
        + parquet_cases()
        + wrapper_cases()
        + stdin_cases()
        + oplog_cases()
    )
    ids = [c.id for c in cases]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise SystemExit(f"duplicate case ids: {sorted(dup)}")
    return cases


def _dump(obj: object) -> bytes:
    return (json.dumps(obj, indent=1, sort_keys=True, ensure_ascii=True) + "\n").encode()


def write_corpus(out: Path = DEFAULT_OUT) -> dict[str, int]:
    """(Re)write the corpus under ``out``; returns the counts of input and flag cases."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    cases = input_cases()
    for case in cases:
        for rel, data in case.files.items():
            path = out / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    (out / "inputs.json").write_bytes(_dump([c.manifest() for c in cases]))
    flags = flag_cases()
    (out / "flags.json").write_bytes(_dump({"trace": FLAG_TRACE, "cases": flags}))
    return {"inputs": len(cases), "flags": len(flags)}


def main(argv: list[str]) -> None:
    out = Path(argv[1]) if len(argv) > 1 else DEFAULT_OUT
    counts = write_corpus(out)
    print(f"wrote {counts['inputs']} input cases and {counts['flags']} flag cases to {out}")


if __name__ == "__main__":
    main(sys.argv)
