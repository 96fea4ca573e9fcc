"""GPU replay backend: runs a simulated op log on real torch pools. Imports torch lazily."""
