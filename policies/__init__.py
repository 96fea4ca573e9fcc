"""Interchangeable cache policies, each registered by name (see ``policies.registry``)."""
