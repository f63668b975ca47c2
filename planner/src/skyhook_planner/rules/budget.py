"""Interruption budget: how many of a Skyhook's nodes may be in progress at once.

`ceiling` follows upstream's maths and defaults: percent
-> max(1, floor(n * percent / 100)) computed in float64 as upstream does, count -> max(1, min(n,
count)), neither -> 100 %. Unlike upstream, the budget is a sliding window, never a batch: a node
that finishes frees its slot for the next node in the same pass, and nothing (a version change,
a config edit, an erroring node) lets more nodes than the ceiling be in progress.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypeVar

from skyhook_planner.model.spec import Budget

T = TypeVar("T")


def ceiling(budget: Budget, matched: int) -> int:
    """Most nodes in progress at once for `matched` selected nodes (at least 1)."""
    if budget.count is not None:
        return max(1, min(matched, budget.count))
    percent = 100 if budget.percent is None else budget.percent
    if matched == 0:
        return 1
    # float64 on purpose: upstream computes int(n * (p / 100.0)), so 100 nodes @29% -> 28.
    return max(1, int(matched * (percent / 100.0)))


def reported_ceiling(budget: Budget, matched: int) -> int:
    """The `ceiling` shown in status.compartmentStatuses (upstream's formula: a count is shown
    as given, even above the node count)."""
    if budget.count is not None:
        return budget.count
    percent = 100 if budget.percent is None else budget.percent
    if matched == 0:
        return 0
    return max(1, int(matched * (percent / 100.0)))


def admit(occupied: Iterable[T], candidates: Sequence[T], limit: int) -> tuple[list[T], list[T]]:
    """Split candidates into (admitted now, left waiting), given the nodes already occupying a
    slot. Occupied nodes keep their slots even if the limit shrank below them."""
    free = max(0, limit - len(list(occupied)))
    return list(candidates[:free]), list(candidates[free:])
