"""Step-time cost model of an SGLang server, split by job.

* :mod:`~simulator.cost.coefficients` - achievable rates and overheads (what a profile fits);
* :mod:`~simulator.cost.geometry` - the model quantities the roofline needs, from a ModelSpec;
* :mod:`~simulator.cost.profile` - calibration profiles: schema, validation, loading;
* :mod:`~simulator.cost.roofline` - :class:`CostModel`, the per-step roofline itself;
* :mod:`~simulator.cost.prefill_sums` - a prefill batch's attention work in closed form.

The decode-jump clock that prices many decode steps at once is the engine's
(:mod:`simulator.engine.decode_clock`). Formulas and a worked example: docs/cost-model.md.
"""

from simulator.cost.coefficients import CostCoefficients
from simulator.cost.geometry import ModelCostGeometry, derive_geometry
from simulator.cost.profile import PROFILE_VERSION, load_profile, validate_profile
from simulator.cost.roofline import CostModel

__all__ = [
    "PROFILE_VERSION",
    "CostCoefficients",
    "CostModel",
    "ModelCostGeometry",
    "derive_geometry",
    "load_profile",
    "validate_profile",
]
