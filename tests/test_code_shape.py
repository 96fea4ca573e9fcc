"""House rule of issue 8: small modules with one job, short functions.

In simulator/, policies/ and traces/: no module over 600 lines and no function over 80 lines.
CLI commands declare their typer options in the signature, which can be long; for functions in
simulator/cli/ only the body is counted.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("simulator", "policies", "traces")
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80


def _sources() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def _function_lengths(path: Path) -> list[tuple[str, int]]:
    """(qualified name, lines) of every function in ``path``; CLI functions count their body."""
    tree = ast.parse(path.read_text(), filename=str(path))
    cli = "cli" in path.relative_to(ROOT).parts
    out: list[tuple[str, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = child.body[0].lineno if cli else child.lineno
                out.append((f"{prefix}{child.name}", child.end_lineno - start + 1))
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")

    visit(tree, "")
    return out


def test_the_scan_sees_the_packages():
    files = _sources()
    assert len(files) > 50, files
    assert any(
        name == "ServerModel.__init__" for name, _ in _function_lengths(ROOT / "simulator/engine/server.py")
    )


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_module_and_functions_are_small(path: Path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{path.relative_to(ROOT)}: {lines} lines"
    long = [(n, k) for n, k in _function_lengths(path) if k > MAX_FUNCTION_LINES]
    assert not long, f"{path.relative_to(ROOT)}: functions over {MAX_FUNCTION_LINES} lines: {long}"
