"""What one pass keeps for the next: per Skyhook, the verdict on each quiet node, with every input
it was decided from.

A node is quiet for a Skyhook when its share of the pass decided nothing to write: no state
change, pod, event, timer or wait beyond what `select` found. Most nodes of a large fleet are
quiet in most passes (done, waiting for the budget, or running a stage pod). The next pass
reuses a quiet node's verdict when its inputs compare equal, instead of learning, tidying and
selecting it again. What the share found over all its selected nodes is kept too and updated
from the nodes looked at again only: the selection, the budget slots, the node statuses and
their counts, the status's nodeState mirror, list sizes and boot ids (`ShareTotals`), the
nodes in an uninstall cycle and the admin cordons (`Tally`, passes/tally.py), and when each
node's first finished pod kept for its logs goes (`learn.expire_finished`). Batches, shared
limits and compartments are still counted over their nodes. The snapshot's pods and
ConfigMaps are kept grouped by node and Skyhook (`Grouped`, passes/grouped.py).

The inputs are compared by value (a node's view, the pods on it, what earlier Skyhooks decided on
it; the Skyhook's spec, pause, holds, config updates and
settings). The memory holds the inputs as the last pass built them from its snapshot: where the
snapshot hands over the same view objects, the comparison is one of identity. Anything
a verdict could depend on that is not an input here makes a node noisy instead: a decision that
waits on the clock asks for a timer, and a node with a timer is never kept.
`tests/test_incremental.py` checks that a pass with memory plans exactly as one without.

Object identity between snapshots (the contract the other modules refer to):

- A view is never changed once handed to a pass, and an object that changed gets a new view
  object. The views (`NodeView`, `PodView`, `ConfigMapView`, `SkyhookView`, `PolicyView`)
  are frozen, so what has to hold it is whoever hands them over, below. Broken, a pass wrongly
  plans less: `Grouped.after` finds changes by identity, so a changed node's view or pods
  handed over as the last objects leave it out of `changed_nodes`; its last inputs and verdict
  are reused, and the pass does not react to the change (no stage started, finished, retried).
- An unchanged object keeps its view object from one snapshot to the next (the store and the
  replay hand over an unchanged kind's tuple itself, which spares even the walk over it).
  Broken, the plan is the same and no more nodes are looked at again (inputs compare equal by
  value), but the pass costs the fleet instead of the changes: every such view is regrouped
  (passes/grouped.py), its node's inputs rebuilt and compared field by field
  (passes/rollout.py `_node_inputs`), its selection checked again (rules/ordering.py
  `selected_nodes`), and the replay applies its queued writes anew.

Who keeps it: the operator's store (`Overlay` in skyhook_operator/store.py merges only the keys
the watch or the writer reported; a watch event decodes its one object anew, a new listing
every object); the replay of queued writes (model/replay.py: a replayed view is the same
object while its stored view and the writes queued for it are, and a view with nothing queued
is the stored one; the writer's lanes, model/lanes.py `listed`, hand over a node's queued
writes as the same tuple while they stand); and the simulator (sim/cluster.py
`SimCluster.snapshot`: a view equal to the last one is the last one).
`operator/tests/wiring/test_view_identity.py` and `planner/tests/test_view_identity.py` test
each keeper directly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from skyhook_planner.model.nodestate import NodeState
from skyhook_planner.model.snapshot import NodeView, PodView
from skyhook_planner.model.status import NodeStatuses
from skyhook_planner.model.waiting import Reason
from skyhook_planner.passes.grouped import Grouped
from skyhook_planner.passes.tally import Tally
from skyhook_planner.rules.ordering import Selected
from skyhook_planner.rules.stages import NodeWork

OCCUPIED = "occupied"  # holds a budget slot
CANDIDATE = "candidate"  # may start if admitted


@dataclass(frozen=True)
class SkyhookInputs:
    """What every node's verdict for one Skyhook depends on (compared by value)."""

    uid: str
    generation: int
    spec: object
    paused: bool
    disabled: bool
    holds: object
    config_updates: Mapping[str, Any]
    artifacts: Mapping[str, object]
    settings: object
    # The Skyhooks a node finishes first (whom they select, how they sequence), and those of
    # them with `sequencing: all` not yet complete everywhere
    ahead: tuple[tuple[str, object, str], ...]
    closed_gates: frozenset[str]
    health_gate: object  # the Skyhook's, else its DeploymentPolicy's


class NodeInputs(NamedTuple):
    """What one node's verdict depends on beyond its Skyhook's inputs. A tuple: a pass builds
    one per selected node, and the memory keeps the last pass's, so a node whose views are
    unchanged compares by identity, field by field."""

    node: NodeView
    pods: tuple[PodView, ...]  # every pod on the node: drains look at all of them
    earlier_complete: tuple[bool | None, ...]  # each earlier Skyhook's verdict on the node
    recorded_boot_id: str | None


@dataclass(frozen=True)
class NodeSelection:
    """What `select` found for one node."""

    work: NodeWork
    done: bool
    reasons: tuple[Reason, ...]  # what holds it back, if anything
    slot: str  # OCCUPIED, CANDIDATE or ""
    failed: bool  # a package erroring or retrying
    # A candidate's pods matching podNonInterruptLabels while its work includes an interrupt,
    # whether or not they still run (admit asks that of each, passes/admit.py `_deferral`)
    protected: tuple[PodView, ...] = ()


@dataclass(frozen=True)
class ShareTotals:
    """What a Skyhook's share found over all its selected nodes as a pass ended: what `select`
    found and adds up to, the nodes admitted, and what the status reports of them. The next
    pass over the same nodes in the same order starts from it and redoes only the nodes it
    looks at again (passes/select.py, passes/rollout.py); `tests/test_incremental.py` checks
    that it equals the totals a pass without memory finds."""

    names: tuple[str, ...]  # the selected nodes, in node order (`Selected.names`)
    order: Mapping[str, int]  # each one's place in `names`
    nodes: Mapping[str, NodeSelection]
    complete: Mapping[str, bool]  # by node: nothing left to do there
    waiting: Mapping[tuple[str, str], tuple[Reason, ...]]  # why each node `select` holds waits
    held: Mapping[str, tuple[Reason, ...]]  # every node with a reason, done or not
    occupied: tuple[NodeView, ...]  # in node order
    candidates: tuple[NodeView, ...]  # in node order
    protected: Mapping[str, tuple[PodView, ...]]
    unfinished: int
    failed: frozenset[str]
    running: frozenset[str]  # the nodes admitted, as advancing found them
    node_statuses: NodeStatuses
    node_state: Mapping[str, Mapping[str, Any]]  # the status's nodeState mirror
    list_sizes: Mapping[str, int]  # each node's bytes in the status's lists (status_size.py)
    boot_ids: Mapping[str, str]  # as `learn.track_reboots` found them


@dataclass(frozen=True)
class NodeVerdict:
    """A quiet node's share of a Skyhook's pass."""

    state: NodeState  # as its annotations record it: a quiet node changes nothing
    selected: NodeSelection
    running: bool  # the admission `finish` was decided with
    node_status: str
    mirror: Mapping[str, Any] | None  # its entries in the status's nodeState, None without
    list_bytes: int  # its bytes in the status's nodeStatus and nodeState (model/status_size.py)
    # When the first of its finished stage pods kept for their logs is due to go (None: none)
    pods_go_at: datetime | None = None


@dataclass(frozen=True)
class SkyhookMemory:
    inputs: SkyhookInputs
    selected: Selected | None = None  # its nodes in node order (passes/prepare.py)
    # Each selected node's inputs (as the last pass built them), and each quiet one's verdict
    node_inputs: Mapping[str, NodeInputs] = field(default_factory=dict)
    verdicts: Mapping[str, NodeVerdict] = field(default_factory=dict)
    tally: Tally | None = None  # its counts over its selected nodes (passes/tally.py)
    totals: ShareTotals | None = None  # what its share found over all its selected nodes
    # What `node_inputs` took from beyond the node's own views and pods: the verdicts of the
    # Skyhooks ahead (passes/earlier.py) and the boot ids its status recorded.
    ahead: tuple[Mapping[str, bool], ...] = ()
    recorded_boot_ids: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PassMemory:
    """What a pass hands the next one, by Skyhook name."""

    skyhooks: Mapping[str, SkyhookMemory] = field(default_factory=dict)
    grouped: Grouped | None = None  # its snapshot's pods and ConfigMaps, grouped
