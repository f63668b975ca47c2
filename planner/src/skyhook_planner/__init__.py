"""Skyhook's planner: pure decisions, no I/O. It imports neither kubernetes, aiohttp nor
the operator (an import-linter contract in the root pyproject.toml checks it).

One pass is `passes.plan.plan(snapshot, settings) -> Plan`. The snapshot holds every Skyhook,
node, Skyhook pod and Skyhook ConfigMap (model/snapshot.py); the plan is an ordered list of
idempotent actions for the writer (model/actions.py), an optional timer to plan again, the
nodes it starts and releases, and every node it holds back with the reasons the blockers gave
(model/waiting.py). The snapshot shows the operator's queued writes as done (model/replay.py),
so a pass decides from the cluster as those writes will leave it. The writer's schedule is pure
and lives here too (model/lanes.py: each node's writes in order, the most urgent node first, a
start behind the releases queued before it); the plan carries what it needs (`starting`,
`releasing`, each action's lane), and the operator's writer (kube/writer.py) sends what the
schedule hands out.

The cluster holds the whole state: node annotations (nodeState, status, cordon), pods and
ConfigMaps, so a restarted operator resumes exactly where the last one stopped. What one pass
keeps for the next (passes/memory.py) only spares work: a pass without it plans the same.
Every step returns its output for the plan, a `Decision` (passes/decision.py), that its caller
merges; the steps of one Skyhook's share are in passes/rollout.py, in the order they run, each
reading the Skyhook's working state handed to it (passes/work.py) and what the Skyhooks before
it decided (passes/earlier.py).

Invariants (hypothesis, planner/tests): a Skyhook never has more nodes in progress than its
budget; stages on a node only ever follow the legal order; a package never starts before its
dependsOn packages completed on that node.
"""
