"""The two kinds of error kvplan raises.

``KvplanError`` (and ``ConfigError``) is the user's: bad configuration or input. The CLI prints its
message on one line and exits 1. ``InternalError`` is kvplan's own: a broken invariant or a run
that stopped making progress is a bug in kvplan, never in the user's input, so the CLI shows it
with its traceback and asks for a report.
"""


class KvplanError(Exception):
    """A user-facing error: the CLI prints its message on one line and exits 1."""


class ConfigError(KvplanError, ValueError):
    """A configuration SGLang itself would refuse (e.g. SWA pool smaller than window + page)."""


class InternalError(Exception):
    """A bug in kvplan (e.g. ``simulator.invariants.InvariantViolation``): shown with a traceback."""


class FlagError(KvplanError):
    """A command-line flag value or combination refused before any work starts (one line naming
    the flag, exit status 1)."""
