"""Errors the simulator raises for bad configuration or input (never for internal bugs)."""


class KvplanError(Exception):
    """A user-facing error: the CLI prints its message on one line and exits 1."""


class ConfigError(KvplanError, ValueError):
    """A configuration SGLang itself would refuse (e.g. SWA pool smaller than window + page)."""
