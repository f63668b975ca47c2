"""How much of a Skyhook's per-node status lists fits in the status, computed purely.

etcd refuses an object over 1.5 MiB (its default request limit), and with it every status
write: upstream's per-node lists (`nodeStatus`, `nodeState`, `nodeBootIds`) reach that at a few
thousand nodes. While the lists fit under the limit they are written whole; past it the status
keeps what a reader needs from it: the counts, the nodes that are not complete (most pressing
first, as many as fit), the boot ids the planner itself reads back, and per package how many
nodes record it. Every node's full record stays on the node (its annotations and labels).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

from skyhook_schemas import keys
from skyhook_schemas.nodestate import (
    BLOCKED,
    COMPLETE,
    DISABLED,
    ERRORING,
    IN_PROGRESS,
    PAUSED,
    UNKNOWN,
    WAITING,
)

# The default limit on the per-node lists together, as JSON: two thirds of etcd's default
# 1.5 MiB, leaving the rest for the spec, the conditions and the metadata.
NODE_LISTS_BYTES = 1024 * 1024

CONDITION_NODE_LISTS_SHORTENED = f"{keys.GROUP}/NodeListsShortened"

# The order nodes are listed in once not all fit: what an administrator acts on first.
_PRESSING = {
    status: place
    for place, status in enumerate(
        (ERRORING, BLOCKED, IN_PROGRESS, PAUSED, UNKNOWN, WAITING, DISABLED)
    )
}
# A node whose boot id the planner reads back: one that may be in an interrupt. A waiting or
# complete node has no stage pod, and starts an interrupt only after another stage ran.
_NO_INTERRUPT = frozenset({COMPLETE, WAITING})
# Per map entry: the quotes, colon and comma around a key and its value; per list, its braces.
_ENTRY = 6
_BRACES = 2 * 3


@dataclass(frozen=True)
class NodeLists:
    """The per-node lists as the status writes them."""

    node_status: Mapping[str, str]
    node_state: Mapping[str, Mapping[str, Any]]
    boot_ids: Mapping[str, str]
    # Set only when the lists were shortened: per nodeState key, the nodes that record it.
    package_nodes: Mapping[str, int] | None = None
    # Each selected node's bytes in nodeStatus and nodeState, for the next pass's `known`
    sizes: Mapping[str, int] = field(default_factory=dict)
    limit: int = NODE_LISTS_BYTES

    @property
    def shortened(self) -> bool:
        return self.package_nodes is not None

    def message(self) -> str:
        """The NodeListsShortened condition's message."""
        listed, nodes = len(self.node_status), len(self.sizes)
        return (
            f"status.nodeStatus and status.nodeState list {listed} of {nodes} nodes "
            f"(no complete node, the most pressing first) to keep them under {self.limit} "
            "bytes; every node's record is on the node: `kubectl skyhook node status`, or its "
            "annotations and labels"
        )


def fit(
    node_status: Mapping[str, str],
    node_state: Mapping[str, Mapping[str, Any]],
    boot_ids: Mapping[str, str],
    *,
    limit: int = NODE_LISTS_BYTES,
    every_boot_id: bool = False,
    known: Mapping[str, int] | None = None,
) -> NodeLists:
    """The lists whole when they fit in `limit` bytes; else shortened. `every_boot_id` keeps
    the boot id of every node (a reboot of a complete node then reapplies it). `known` holds
    the sizes (`NodeLists.sizes`) of nodes whose status and entries are those they were
    computed from: a pass counts only the nodes that changed."""
    sizes = dict(known or {})
    for name in node_status.keys() - sizes.keys():
        sizes[name] = node_bytes(name, node_status[name], node_state.get(name))
    ids = _ENTRY * len(boot_ids) + sum(map(len, boot_ids)) + sum(map(len, boot_ids.values()))
    if sum(sizes.values()) + ids + _BRACES <= limit:
        return NodeLists(node_status, node_state, boot_ids, sizes=sizes, limit=limit)
    pending = sorted(
        (name for name, status in node_status.items() if status != COMPLETE),
        key=lambda name: (_PRESSING.get(node_status[name], len(_PRESSING)), name),
    )
    kept_ids = (
        boot_ids
        if every_boot_id
        else {
            name: boot_ids[name]
            for name in pending
            if name in boot_ids and node_status[name] not in _NO_INTERRUPT
        }
    )
    room = limit - _BRACES - sum(_ENTRY + len(n) + len(i) for n, i in kept_ids.items())
    listed_status: dict[str, str] = {}
    listed_state: dict[str, Mapping[str, Any]] = {}
    for name in pending:
        room -= sizes[name]
        if room < 0:
            break
        listed_status[name] = node_status[name]
        if name in node_state:
            listed_state[name] = node_state[name]
    package_nodes = Counter(chain.from_iterable(node_state.values()))
    return NodeLists(
        listed_status,
        listed_state,
        kept_ids,
        package_nodes=dict(sorted(package_nodes.items())),
        sizes=sizes,
        limit=limit,
    )


def node_bytes(name: str, status: str, entries: Mapping[str, Any] | None) -> int:
    """The JSON bytes of the node's nodeStatus and nodeState entries, counted from the lengths
    of their keys and values (at least the real size, and within a fifth of it)."""
    size = _ENTRY + len(name) + len(status)
    if entries:
        size += _ENTRY + len(name)
        for key, entry in entries.items():
            size += _ENTRY + len(key) + sum(_ENTRY + len(k) + len(str(v)) for k, v in entry.items())
    return size
