"""The engine tests' fixture: every server they build reaches its cache through a proxy that
raises on any attribute outside the controller protocol (``simulator.radix.protocol``).

A test module opts in with ``from controller_proxy import strict_controller  # noqa: F401``
(an autouse fixture, so importing it is enough).
"""

from __future__ import annotations

import pytest

import simulator.engine.server as server_module
from simulator.radix.protocol import StrictController


@pytest.fixture(autouse=True)
def strict_controller(monkeypatch):
    """Wrap the controller each ``ServerModel`` builds in :class:`StrictController`."""
    build = server_module.build_controller

    def strict_build(*args, **kwargs):
        return StrictController(build(*args, **kwargs))

    monkeypatch.setattr(server_module, "build_controller", strict_build)
    return strict_build
