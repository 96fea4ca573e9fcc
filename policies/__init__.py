"""Interchangeable cache policies, each registered by name (see ``policies.registry``)."""

import simulator  # noqa: F401  (installs the compiled-module finder before any policy loads)
