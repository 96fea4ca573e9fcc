"""The case records of the bad-input corpus and the helpers every case family shares.

An input case is one file (or one RAGPulse directory) under ``cases/`` plus what kvplan must make
of it: an error whose one-line text contains ``expect["error"]`` (the file, the line and the
field), or a correct read (``expect["result"]``: requests and token totals). ``per_command``
overrides the expectation for a command whose answer differs by design (``run`` rejects a prompt
longer than the model's context that ``trace stats`` reads). Everything here is deterministic:
gzip without a timestamp, zip entries dated 1980-01-01, random bytes from a fixed seed.
"""

from __future__ import annotations

import gzip
import io
import json
import zipfile
from dataclasses import dataclass, field
from typing import Any

#: The commands that read a trace, as the corpus test names them.
TRACE_COMMANDS = ("trace stats", "trace head", "trace convert", "run", "demo", "cache-replay")
#: Commands without --format / --block-size: a case that needs those flags skips them.
NO_FORMAT_FLAG = ("demo", "cache-replay")


@dataclass
class Case:
    """One malformed (or valid but unusual) input and what kvplan must make of it."""

    id: str
    files: dict[str, bytes]
    target: str
    expect: dict[str, Any]
    desc: str
    args: list[str] = field(default_factory=list)
    commands: list[str] | None = None
    per_command: dict[str, dict[str, Any]] = field(default_factory=dict)
    via: str = "path"  # "path", "stdin" (in process) or "pipe" / "fifo" (a subprocess)

    def manifest(self) -> dict[str, Any]:
        cmds = list(self.commands or TRACE_COMMANDS)
        if self.args:
            cmds = [c for c in cmds if c not in NO_FORMAT_FLAG]
        out: dict[str, Any] = {
            "id": self.id,
            "desc": self.desc,
            "target": self.target,
            "args": self.args,
            "commands": cmds,
            "expect": self.expect,
            "via": self.via,
        }
        if self.per_command:
            out["per_command"] = self.per_command
        return out


def err(fname: str, line: int | None = None, fld: str | None = None, problem: str = "") -> dict[str, Any]:
    """The expected one-line error, as ``TraceFormatError`` words it: ``FILE:LINE: field 'F': problem``
    (the parts that are known; a substring of the whole message)."""
    text = (fname if line is None else f"{fname}:{line}") + ": "
    if fld is not None:
        text += f"field '{fld}': "
    return {"error": (text + problem).rstrip()}


def result(requests: int, input_tokens: int, output_tokens: int, warning: str | None = None) -> dict:
    """The expected correct read: how many requests, and the prompt and output token totals."""
    out: dict[str, Any] = {
        "result": {"requests": requests, "input_tokens": input_tokens, "output_tokens": output_tokens}
    }
    if warning:
        out["warning"] = warning
    return out


def lines(*records: str, nl: str = "\n", trailing: bool = True) -> bytes:
    """JSONL/CSV text from raw record strings."""
    return (nl.join(records) + (nl if trailing else "")).encode()


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(", ", ": "))


def gz(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=6, mtime=0)


def zipped(name: str, data: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data)
    return buf.getvalue()


def prng_bytes(seed: int, n: int) -> bytes:
    """Deterministic pseudo-random bytes (a 64-bit LCG), independent of any library's RNG."""
    out = bytearray()
    x = seed or 1
    for _ in range(n):
        x = (6364136223846793005 * x + 1442695040888963407) % 2**64
        out.append(x >> 56)
    return bytes(out)
