"""The in-memory cluster for planner tests and benchmarks; it lives in the operator's core
(`skyhook_operator.core.simcluster`) because `kubectl skyhook plan` forecasts with it too."""

from skyhook_operator.core.simcluster import SimCluster, make_node

__all__ = ["SimCluster", "make_node"]
