#!/usr/bin/env bash
# Rebuild the example report reports/mooncake-arxiv-200/ (simulator/reports/example.py says what
# it is): a 25-point sweep of 200 Mooncake arXiv requests, then `kvplan report`. Run from anywhere;
# JOBS=N runs the sweep on N local processes (same results). tests/test_report.py rebuilds it into
# a temporary directory and compares its numbers with the committed figures.json.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
"$PY" -m simulator.reports.example "${1:-reports/mooncake-arxiv-200}"
