"""Compatibility re-export of the cost model's old single-module layout.

The code now lives in :mod:`simulator.cost` (coefficients, geometry, profile, roofline) and
:mod:`simulator.engine.decode_clock` (``DecodeClock``, ``triangles``); import from there. This
module stays only while callers still use the old path.
"""

from simulator.cost import (
    PROFILE_VERSION,
    CostCoefficients,
    CostModel,
    ModelCostGeometry,
    derive_geometry,
    load_profile,
    validate_profile,
)
from simulator.engine.decode_clock import DecodeClock, triangles

__all__ = [
    "PROFILE_VERSION",
    "CostCoefficients",
    "CostModel",
    "DecodeClock",
    "ModelCostGeometry",
    "derive_geometry",
    "load_profile",
    "triangles",
    "validate_profile",
]
