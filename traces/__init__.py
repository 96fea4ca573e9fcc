"""Canonical traces, readers for public trace formats, generators and statistics."""
