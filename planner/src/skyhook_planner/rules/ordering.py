"""Who goes first: Skyhooks by (priority, name), nodes in a deterministic order, and packages
by their dependsOn DAG.

A node works through one Skyhook at a time: a Skyhook may start on a node only when every
Skyhook ahead of it that targets the node is complete there (paused ones block, disabled ones
do not). A package may start on a node only when every package it depends on is complete there
(a plain topological rule; upstream's "all roots first" variant is a documented quirk we drop).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import compress
from operator import attrgetter, is_not, itemgetter

from skyhook_planner.model.snapshot import NodeView, SkyhookView
from skyhook_planner.model.spec import Package
from skyhook_planner.model.times import stamp
from skyhook_planner.model.vocabulary import LabelSelector

_EPOCH = datetime.min


def skyhook_order(skyhooks: Iterable[SkyhookView]) -> list[SkyhookView]:
    """Lower priority first, then name. Invalid specs sort last (they never run)."""
    return sorted(
        skyhooks,
        key=lambda s: (s.spec is None, s.spec.priority if s.spec else 0, s.name),
    )


def node_order_key(node: NodeView) -> tuple[datetime, str]:
    """Oldest node first, ties by name: stable across passes, so restarts pick the same nodes."""
    created = node.created.replace(tzinfo=None) if node.created else _EPOCH
    return (created, node.name)


@dataclass(frozen=True)
class Selected:
    """The nodes a selector matches, in node order, and every node it was decided from. Sorting
    a fleet each pass costs more than the rest of a quiet pass, so the next pass reuses the
    order while no node came, went, changed its creation time, or left or joined the
    selection."""

    selector: LabelSelector
    seen: Mapping[str, NodeView]  # by name: every node of the snapshot
    matched: tuple[NodeView, ...]
    # `matched`'s names: the same tuple while the order holds, so the next pass knows at once
    # that its nodes are the ones the last pass counted (passes/select.py)
    names: tuple[str, ...]


def selected_nodes(
    nodes: Sequence[NodeView],
    by_name: Mapping[str, NodeView],
    selector: LabelSelector,
    last: Selected | None = None,
) -> Selected:
    """The nodes `selector` matches in node order (rules/ordering.py), the order taken over
    from `last` where it still holds."""
    if last is not None and last.selector == selector and len(nodes) == len(last.seen):
        seen, replaced = last.seen, False
        # The nodes whose view is not the one `last` saw, found in C: most are.
        names = map(attrgetter("name"), nodes)
        for node in compress(nodes, map(is_not, map(seen.get, names), nodes)):
            before = seen.get(node.name)
            if before is None or before.created != node.created:
                break
            if before.labels != node.labels and (
                selector.matches(before.labels) != selector.matches(node.labels)
            ):
                break  # selected now and not before, or the other way round
            replaced = True
        else:
            if not replaced:
                return last
            matched = tuple(map(by_name.__getitem__, last.names))
            return Selected(selector, by_name, matched, last.names)
    ordered = sorted((n for n in nodes if selector.matches(n.labels)), key=node_order_key)
    return Selected(selector, by_name, tuple(ordered), tuple(n.name for n in ordered))


def runnable(
    packages: Mapping[str, Package], due: Iterable[str], is_complete: Callable[[str], bool]
) -> list[str]:
    """The due packages whose dependencies are all complete on the node, sorted by name."""
    return sorted(
        name for name in due if all(is_complete(dep) for dep in packages[name].depends_on)
    )


# --- node order: status.nodePriority, status.nodeOrderOffset, SKYHOOK_NODE_ORDER -------------
#
# Each node a Skyhook starts is recorded in nodePriority with the time it was picked, to the
# second (the precision the status keeps, so a value computed before and after a re-read
# agrees). A node's order is the offset plus its index among the recorded nodes sorted by
# (pick time, name). Entries are retired only from the front, once complete (or no longer
# selected), each adding one to the offset: retiring from the front keeps every other node's
# order as it was, so a node's order never changes and is never handed out twice.


def picked_at(now: datetime) -> str:
    return stamp(now)


def _in_pick_order(priority: Mapping[str, str]) -> list[str]:
    """By (pick time, name): pairs sorted without a key function, in C."""
    return list(map(itemgetter(1), sorted(zip(priority.values(), priority, strict=True))))


def node_orders(priority: Mapping[str, str], offset: int) -> dict[str, int]:
    """Each recorded node's SKYHOOK_NODE_ORDER."""
    return {node: offset + index for index, node in enumerate(_in_pick_order(priority))}


def retire(
    priority: Mapping[str, str], offset: int, done: Callable[[str], bool]
) -> tuple[dict[str, str], int]:
    """nodePriority and nodeOrderOffset with the finished nodes at the front retired."""
    remaining = dict(priority)
    for node in _in_pick_order(priority):
        if not done(node):
            break
        del remaining[node]
        offset += 1
    return remaining, offset
