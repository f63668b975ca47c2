"""What the planner reads and writes: the cluster snapshot, the decoded spec and policy, the
settings a pass needs, node state and Skyhook status, and the plan it returns."""
