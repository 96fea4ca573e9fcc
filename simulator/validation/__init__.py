"""Reproductions of published SGLang measurements (the seeds), as library code tests and docs share."""
