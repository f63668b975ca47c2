"""The rollout rules, each pure and on its own: the stage machine, ordering, the budget,
DeploymentPolicy batches, holds, interrupt gates and merged interrupts."""
