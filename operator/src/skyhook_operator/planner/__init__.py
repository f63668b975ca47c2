"""The planner: pure decisions, no I/O (imports neither kopf nor kubernetes).

One pass is `plan(snapshot, settings) -> Plan` (planner/plan.py). The snapshot holds every
Skyhook, node, Skyhook pod and Skyhook ConfigMap (planner/model.py); the plan is an ordered list
of idempotent actions for the writer, plus an optional timer to plan again. Nothing is kept in
memory between passes: node annotations (nodeState, status, cordon), pods and ConfigMaps are the
whole state, so a restarted operator resumes exactly where the last one stopped.

A pass, in order:
1. Learn: every finished Skyhook pod updates its package entry in the node's nodeState working
   copy (complete, or erroring with its restart count) and is deleted; a failed pod whose
   backoff has elapsed is deleted so its stage runs again. A changed boot id completes an
   interrupt that was waiting for a reboot. (observe.py, learning.py)
2. Per Skyhook, in (priority, name) order (ordering.py): add the finalizer; a deleting Skyhook
   gets its cleanup plan (cleanup.py) instead. Paused, disabled and invalid Skyhooks only get
   their status. Otherwise:
   - select nodes (nodeSelectors, ignore label, tolerated taints); a node is ready for this
     Skyhook only when every earlier Skyhook on it is complete;
   - upsert package ConfigMaps; accept a configMap edit once no pod of that package runs,
     marking config to rerun on every node that is past it (configmaps.py);
   - admit nodes within the interruption budget (budget.py): nodes already in progress keep
     their slot, free slots go to the next incomplete, ready nodes in a deterministic order, in
     this same pass, so a slot never idles;
   - for each admitted node, the stage machine (stages.py) names each package's next stage,
     dependsOn decides which may run (ordering.py), an interrupt package needs the node
     cordoned and drained first (gates.py), and the packages due for an interrupt share one
     merged interrupt pod (interrupts.py). A node that finishes is uncordoned (only if we
     cordoned it).
3. Remove the runtime-required taint from nodes where every runtimeRequired Skyhook is done.
4. Emit node patches (only what changed), node conditions, and each Skyhook's status as a
   merge patch (status.py).

Modules: model.py (snapshot and actions), plan.py (the pass and what it shares), skyhook.py
(one Skyhook's share), observe.py (finished pods, reboots, stale pods), learning.py (pod results
as pure functions), configmaps.py, noderun.py (advancing one node), stages.py, budget.py,
ordering.py, gates.py, interrupts.py, cleanup.py, simulate.py (an in-memory cluster for
previews, tests and benchmarks).

Invariants (tested with hypothesis in operator/tests/unit): a Skyhook never has more nodes in
progress than its budget; stages on a node only ever follow the legal order; a package never
starts before its dependsOn packages completed on that node.
"""
