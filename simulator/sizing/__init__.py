"""The steps of KV pool sizing; :mod:`simulator.pool_sizing` strings them together."""
