"""``kvplan pools`` (owned by the pool-sizing work)."""


def pools() -> None:
    """Print SGLang's full / SWA / host pool sizes for a model, GPU and flags."""
    raise SystemExit("kvplan pools: not built yet")
