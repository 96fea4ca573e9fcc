"""The compiled build's record stamps (size, mtime) of the sources it hashed, so that a start-up
does not hash every source again (issue 14), and a changed source is still caught."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import simulator.compiled_modules as cm

STALE = "built from another version of the source"


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A checkout with one built module ``pkg.mod`` (a .py and a .pxd), sources an hour old."""
    monkeypatch.setattr(cm, "ROOT", str(tmp_path))
    monkeypatch.setattr(cm, "RECORD", str(tmp_path / "compiled_sources.txt"))
    monkeypatch.delenv("KVPLAN_PURE_PYTHON", raising=False)
    monkeypatch.delenv("KVPLAN_REQUIRE_COMPILED", raising=False)
    (tmp_path / "pkg").mkdir()
    for name, text in (("mod.py", "x = 1\n"), ("mod.pxd", "cdef int x\n")):
        path = tmp_path / "pkg" / name
        path.write_text(text)
        old = time.time() - 3600
        os.utime(path, (old, old))
    cm.write_record(("pkg.mod",))
    return tmp_path


def _why() -> str | None:
    """A fresh finder's verdict on ``pkg.mod`` (None: its build loads)."""
    finder = cm.CompiledFinder()
    return finder._why_source("pkg.mod", cm.source_path("pkg.mod"), "/built/mod.so")


def _count_hashes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    hashed: list[str] = []
    real = cm.source_hash

    def counting(path: str) -> str:
        hashed.append(path)
        return real(path)

    monkeypatch.setattr(cm, "source_hash", counting)
    return hashed


def test_unchanged_old_sources_are_not_hashed(checkout: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hashed = _count_hashes(monkeypatch)
    assert _why() is None
    assert hashed == []
    assert cm.read_record() == {"pkg.mod": cm.module_hash("pkg.mod")}


@pytest.mark.parametrize("name", ["mod.py", "mod.pxd"])
def test_an_edited_source_is_hashed_and_stale(
    checkout: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """An edit of the same size still moves the modification time: the file is hashed again."""
    path = checkout / "pkg" / name
    path.write_text(path.read_text().replace("x", "y"))
    hashed = _count_hashes(monkeypatch)
    assert _why() == STALE
    assert str(path) in hashed


def test_a_source_as_new_as_the_record_is_hashed(checkout: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file written close to the build (within the margin) is hashed, even with its stamp held:
    a second write in the same timestamp tick would not have moved its time."""
    py = checkout / "pkg" / "mod.py"
    os.utime(py, None)
    cm.write_record(("pkg.mod",))
    hashed = _count_hashes(monkeypatch)
    assert _why() is None
    assert str(py) in hashed


def test_a_touched_source_is_hashed_and_still_current(
    checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    os.utime(checkout / "pkg" / "mod.pxd", None)
    hashed = _count_hashes(monkeypatch)
    assert _why() is None
    assert hashed != []


def test_a_record_without_stamps_hashes(checkout: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The record of an older kvplan (module and hash only) still loads a current build."""
    Path(cm.RECORD).write_text(f"pkg.mod {cm.module_hash('pkg.mod')}\n")
    old = time.time() + 60
    os.utime(cm.RECORD, (old, old))
    hashed = _count_hashes(monkeypatch)
    assert _why() is None
    assert hashed != []
    assert cm.read_record() == {"pkg.mod": cm.module_hash("pkg.mod")}


def test_no_record_is_stale(checkout: Path) -> None:
    os.remove(cm.RECORD)
    assert cm.read_stamps() == ({}, 0)
    assert _why() == STALE
