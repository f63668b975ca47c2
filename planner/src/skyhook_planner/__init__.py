"""The core: pure decisions, no I/O. It imports neither kopf, kubernetes, aiohttp nor the
operator's `kube` package (an import-linter contract in the root pyproject.toml checks it).

One pass is `plan(snapshot, settings) -> Plan` (plan.py). The snapshot holds every Skyhook,
node, Skyhook pod and Skyhook ConfigMap (views.py); the plan is an ordered list of idempotent
actions for the writer (actions.py), an optional timer to plan again and the nodes it starts
and releases. Nodes the snapshot marks busy (their writes from an earlier pass still going
out) get no action, and those being started or released hold a budget slot; they are planned
once their writes are done.
Nothing is kept in memory between passes: node annotations (nodeState, status, cordon), pods
and ConfigMaps are the whole state, so a restarted operator resumes exactly where the last one
stopped.

Every step returns a `Decision` (decision.py) that its caller merges; steps read what earlier
steps decided through a read-only `SkyhookContext` (context.py). A pass, in order:
1. Per Skyhook, in (priority, name) order (ordering.py): add the finalizer and the version
   annotation; a deleting Skyhook gets its cleanup (cleanup.py) instead. Invalid Skyhooks only
   get their status. Otherwise (skyhook.py):
   - learn: every finished Skyhook pod updates its package entry (complete, or erroring with
     its restart count) and is deleted; a failed pod whose backoff has elapsed is deleted so
     its stage runs again; a changed boot id completes an interrupt that was waiting for a
     reboot; a running pod that no longer matches the spec is replaced (learn.py,
     results.py);
   - upsert package ConfigMaps; accept a configMap edit once no pod of that package runs,
     marking config to rerun on every node that is past it (configmaps.py);
   - select nodes (nodeSelectors, ignore label, tolerated taints); a node is ready for this
     Skyhook only when every earlier Skyhook on it is complete;
   - admit nodes within the interruption budget (budget.py): nodes already in progress keep
     their slot, free slots go to the next incomplete, ready nodes in a deterministic order, in
     this same pass, so a slot never idles; paused and disabled Skyhooks admit nobody;
     with a DeploymentPolicy, nodes are admitted per compartment instead (policy.py): a
     compartment whose batch has finished evaluates it and starts the next, never above its
     ceiling, and a stopped compartment starts nothing;
   - for each admitted node (noderun.py), the stage machine (stages.py) names each package's
     next stage, dependsOn decides which may run (ordering.py), an interrupt package needs the
     node cordoned and drained first (gates.py), and the packages due for an interrupt share
     one merged interrupt pod (interrupts.py), built like every pod in podbuilder.py. A node
     that finishes is uncordoned (only if we cordoned it);
   - node state becomes annotation changes (nodestate.py) and the Skyhook's status a merge
     patch (status.py).
2. Remove the runtime-required taint from nodes where every runtimeRequired Skyhook is done.
3. Assemble: per node its patch (conditions included), metadata ConfigMaps and pods;
   SCR-wide actions first and last; events at the end.

Shared words (stage, state and status names, taints, tolerations, selectors, durations) are in
vocabulary.py; SCR spec decoding in spec.py; the settings the core needs in settings.py.

Invariants (tested with hypothesis in operator/tests/unit): a Skyhook never has more nodes in
progress than its budget; stages on a node only ever follow the legal order; a package never
starts before its dependsOn packages completed on that node.
"""
