"""Paths to the trace samples in the repo and to the full public traces beside it."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "traces" / "data"
SHARED_TRACES = REPO.parent / "shared" / "traces"


@pytest.fixture
def shared_traces() -> Path:
    """The full public traces (../shared/traces); tests using them skip when it is absent."""
    if not SHARED_TRACES.is_dir():
        pytest.skip(f"full public traces not found at {SHARED_TRACES}")
    return SHARED_TRACES


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """Under pytest-xdist (``make test``) the corpus runs in a worker: carry its summary line
    back to the controller, which prints the terminal summary."""
    line = getattr(node, "workeroutput", {}).get("kvplan_corpus_summary")
    if line:
        node.config._kvplan_corpus_summary = line


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """The bad-input corpus's counts (tests/test_bad_input_corpus.py), shown without ``-s``."""
    line = getattr(config, "_kvplan_corpus_summary", None)
    if line:
        terminalreporter.write_line(line)
