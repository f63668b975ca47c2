"""What a Skyhook's share counts over all its selected nodes, kept between passes (`Tally`, in
the Skyhook's memory, passes/memory.py) and updated only from the nodes looked at again.

A node whose verdict the pass reused (passes/memory.py) ends the pass in the state it ended the
last one in, so what it adds to a tally is what it added then. The pass recounts the other nodes
only (`fresh`: the ones it decided again, and any whose state one of its steps changed), and
recounts every node when the selected nodes are not the ones the tally counted. What a node
adds may also depend on what the Skyhooks before this one wrote of it this pass or the last
(its cordon): those nodes are recounted too.

`tests/test_incremental.py` checks that a tally kept this way equals one counted from nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter

from skyhook_planner.model.nodestate import NodeState
from skyhook_planner.model.snapshot import NodeView


@dataclass(frozen=True)
class Tally:
    """One Skyhook's counts over its selected nodes as a pass ends."""

    matched: frozenset[str]  # the selected nodes counted
    # Nodes whose state has an entry in its uninstall cycle (passes/uninstall.py)
    uninstalling: frozenset[str]
    # Nodes someone else cordoned: no Skyhook's marker on them (passes/report.py)
    admin_cordoned: frozenset[str]
    # Nodes whose cordon the Skyhooks before this one wrote: recounted next pass as well
    touched: frozenset[str]


def tally(
    last: Tally | None,
    matched: Sequence[NodeView],
    fresh: Collection[str],
    *,
    nodes: Mapping[str, NodeView],
    state: Callable[[NodeView], NodeState],
    admin_cordoned: Callable[[NodeView], bool],
    touched: frozenset[str],
) -> Tally:
    """This pass's tally: `last` with the `fresh` nodes (and those whose cordon the Skyhooks
    before this one wrote, this pass or the last) recounted, or every node recounted when
    `last` counted other nodes. `nodes`: the snapshot's, by name; `state`: a node's state as
    the pass leaves it."""
    names = frozenset(map(_name, matched))
    if last is None or last.matched != names:
        recount: Collection[NodeView] = matched
        uninstalling: set[str] = set()
        admin: set[str] = set()
    else:
        again = names & {*fresh, *touched, *last.touched}
        recount = [nodes[name] for name in again]
        uninstalling, admin = set(last.uninstalling), set(last.admin_cordoned)
    for node in recount:
        name = node.name
        uninstalling.discard(name)
        admin.discard(name)
        if state(node).uninstalling:
            uninstalling.add(name)
        if admin_cordoned(node):
            admin.add(name)
    return Tally(names, frozenset(uninstalling), frozenset(admin), touched & names)


_name = attrgetter("name")
