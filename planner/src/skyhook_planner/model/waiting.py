"""Why a node waits: the `Reason` a blocker (rules/blockers.py) gives for a node that may not
start work now; a plan carries them per (Skyhook, node) in `Plan.waiting`.
"""

from __future__ import annotations

from dataclasses import dataclass

# Which blocker a reason comes from: one word each, in the order the pass asks them.
SKYHOOK = "skyhook"  # the Skyhook cannot run: its policy or an image artifact is missing
SWITCHED_OFF = "switched-off"  # paused or disabled
STATE = "state"  # the node's nodeState annotation cannot be read
IGNORED = "ignored"
TAINTS = "taints"
IMAGE = "image"  # no candidate of an image compatibility artifact matches the node
NOT_READY = "not-ready"
ORDERING = "ordering"  # a Skyhook ahead of this one is not complete on the node
HOLD = "hold"  # a closed maintenance window or a firing alert
BATCH = "batch"  # the DeploymentPolicy's compartment: batch full or stopped
BUDGET = "budget"
SHARED_BUDGET = "shared-budget"  # the DeploymentPolicy's budget over all its Skyhooks (ours)
TOPOLOGY = "topology"  # the DeploymentPolicy's per-domain limit (ours)
SOAK = "soak"  # ours: the soak time since the last batch (or node) start is not over
REBOOT_DEADLINE = "reboot-deadline"  # ours: the node did not come back from its reboot in time
HEALTH = "health"  # ours: the health gate holds the node, or halts the rollout
DRAIN = "drain"  # pods matching podNonInterruptLabels, or a drain under way
BLOCKERS = (
    SKYHOOK, SWITCHED_OFF, STATE, IGNORED, TAINTS, IMAGE, NOT_READY, ORDERING, HOLD, BATCH,
    SOAK, SHARED_BUDGET, TOPOLOGY, BUDGET, DRAIN, REBOOT_DEADLINE, HEALTH,
)  # fmt: skip


@dataclass(frozen=True)
class Reason:
    """Why a node waits. `message` is for a person; `nodes` names the other nodes involved
    (those holding the budget's slots); `hold` is a hold's reason word (holds.REASONS, or
    soak.SOAKING), by which the held-nodes metrics count it."""

    blocker: str
    message: str
    nodes: tuple[str, ...] = ()
    hold: str = ""


@dataclass(frozen=True)
class Held:
    """A node whose next step waits on a hold: a closed maintenance window, a firing alert, or
    (ours) a soak time. `reason` is one of holds.REASONS or soak.SOAKING."""

    skyhook: str
    node: str
    reason: str
    message: str
