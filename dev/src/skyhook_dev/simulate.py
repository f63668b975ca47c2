"""The in-memory cluster for planner tests and benchmarks; it lives in the operator's core
(`skyhook_operator.core.simcluster`) because `kubectl skyhook plan` forecasts with it too."""

from skyhook_operator.core.simcluster import SimCluster, make_node
from skyhook_operator.core.status import apply_merge_patch

__all__ = ["SimCluster", "apply_merge_patch", "make_node"]
