"""``kvplan cache-replay`` (owned by the radix-cache work)."""


def cache_replay() -> None:
    """Serve a workload one request at a time through the SWA radix cache."""
    raise SystemExit("kvplan cache-replay: not built yet")
