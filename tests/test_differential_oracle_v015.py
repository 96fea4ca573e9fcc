"""kvplan's replay against SGLang 0.5.15's cache (the legacy SWARadixCache's behaviour), on the
same generated workloads as tests/test_differential_oracle.py's 0.5.23 check.

A file of its own so that pytest-xdist (``--dist loadfile``, one file per worker) runs the two
versions side by side; together they made the suite's longest file. The check, the fixtures and
the oracle processes are test_differential_oracle's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from oracle_harness import OracleWorker
from test_differential_oracle import (  # noqa: F401 - fixtures are found by name
    PAGE_SIZES,
    check_cache_replay,
    oracle_process,
    oracle_worker,
)

pytestmark = pytest.mark.oracle


@pytest.mark.parametrize("page_size", PAGE_SIZES, ids=[f"sglang0.5.15-page{p}" for p in PAGE_SIZES])
def test_cache_replay_matches_sglang(
    page_size: int,
    oracle_worker: Callable[..., OracleWorker],  # noqa: F811 - the imported fixture, by name
    record_property: Any,
) -> None:
    """kvplan's replay equals SGLang 0.5.15's cache request by request on generated workloads."""
    check_cache_replay("0.5.15", page_size, oracle_worker, record_property)
