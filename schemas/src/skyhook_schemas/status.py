"""A Skyhook's `status`, typed: what the operator writes there, with upstream's keys, and what
the planner, the forecast, the metrics and `kubectl skyhook` read back.

Decoding is lenient on purpose: anyone allowed to edit a status can write anything there, and a
field of the wrong shape reads as absent (the next pass writes it again) rather than stopping
the rollout. The stored document is kept beside the fields (`document`), so a writer computes
its merge patch against exactly what is stored, stray keys included.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _strings(value: object) -> dict[str, str]:
    return {str(k): v for k, v in _mapping(value).items() if isinstance(v, str)}


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class BatchState:
    """One DeploymentPolicy compartment's progress, kept in
    status.compartmentStatuses.<name>.batchState with upstream's keys."""

    current_batch: int = 1
    consecutive_failures: int = 0
    completed_nodes: int = 0
    failed_nodes: int = 0
    should_stop: bool = False
    last_batch_size: int = 0
    last_batch_failed: bool = False

    @classmethod
    def from_json(cls, raw: object) -> BatchState:
        """Read what a pass wrote; a missing or malformed field takes its initial value."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            value = _mapping(raw).get(_camel(f.name))
            wanted = bool if f.type in {"bool", bool} else int
            if isinstance(value, wanted) and (wanted is bool or not isinstance(value, bool)):
                values[f.name] = value if wanted is bool or value >= 0 else 0
        return cls(**values)

    def to_json(self, *, explicit: bool = False) -> dict[str, Any]:
        """The stored form: zero and false values left out, or every field (`explicit`), as a
        merge patch must spell a reset so that it overwrites `shouldStop: true`."""
        return {
            _camel(f.name): getattr(self, f.name)
            for f in fields(self)
            if explicit or getattr(self, f.name)
        }

    def progress(self, nodes: int) -> int:
        """Percent of the compartment's nodes processed (complete or failed)."""
        return (self.completed_nodes + self.failed_nodes) * 100 // nodes if nodes else 0


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


@dataclass(frozen=True)
class CompartmentStatus:
    """One entry of `compartmentStatuses`; `batch_state` None when it has none (a compartment
    without a strategy)."""

    matched: int = 0
    ceiling: int = 0
    in_progress: int = 0
    completed: int = 0
    progress_percent: int = 0
    batch_state: BatchState | None = None

    @classmethod
    def from_json(cls, body: object) -> CompartmentStatus:
        raw = _mapping(body)
        batch = raw.get("batchState")
        return cls(
            matched=_int(raw.get("matched")) or 0,
            ceiling=_int(raw.get("ceiling")) or 0,
            in_progress=_int(raw.get("inProgress")) or 0,
            completed=_int(raw.get("completed")) or 0,
            progress_percent=_int(raw.get("progressPercent")) or 0,
            batch_state=BatchState.from_json(batch) if isinstance(batch, Mapping) else None,
        )


@dataclass(frozen=True)
class SkyhookStatus:
    status: str = ""  # overall: one of nodestate.STATUSES; "" before the first pass
    observed_generation: int | None = None
    node_state: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # JSON entries
    node_status: Mapping[str, str] = field(default_factory=dict)
    node_boot_ids: Mapping[str, str] = field(default_factory=dict)
    # When each node was first picked (RFC 3339), until it is retired; and how many were retired
    node_priority: Mapping[str, str] = field(default_factory=dict)
    node_order_offset: int = 0
    # Ours (soakTime): when each compartment's last batch started (RFC 3339); without a
    # DeploymentPolicy, `__default__`: when the last node started
    batch_starts: Mapping[str, str] = field(default_factory=dict)
    # Ours (healthGate): since when each node has waited at the health gate (RFC 3339)
    health_gate_waiting: Mapping[str, str] = field(default_factory=dict)
    interrupt_deferred: Mapping[str, str] = field(default_factory=dict)
    config_updates: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    complete_nodes: str = ""  # "<complete>/<matched>"
    nodes_in_progress: int = 0
    package_list: str = ""
    compartment_statuses: Mapping[str, CompartmentStatus] = field(default_factory=dict)
    conditions: tuple[Mapping[str, Any], ...] = ()
    document: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_json(cls, body: object) -> SkyhookStatus:
        raw = _mapping(body)
        status = raw.get("status")
        return cls(
            status=status if isinstance(status, str) else "",
            observed_generation=_int(raw.get("observedGeneration")),
            node_state={
                str(node): entries
                for node, entries in _mapping(raw.get("nodeState")).items()
                if isinstance(entries, Mapping)
            },
            node_status=_strings(raw.get("nodeStatus")),
            node_boot_ids=_strings(raw.get("nodeBootIds")),
            node_priority=_strings(raw.get("nodePriority")),
            node_order_offset=_int(raw.get("nodeOrderOffset")) or 0,
            batch_starts=_strings(raw.get("batchStarts")),
            health_gate_waiting=_strings(raw.get("healthGateWaiting")),
            interrupt_deferred=_strings(raw.get("interruptDeferred")),
            config_updates={
                str(name): tuple(str(k) for k in keys)
                for name, keys in _mapping(raw.get("configUpdates")).items()
                if isinstance(keys, list)
            },
            complete_nodes=str(raw.get("completeNodes") or ""),
            nodes_in_progress=_int(raw.get("nodesInProgress")) or 0,
            package_list=str(raw.get("packageList") or ""),
            compartment_statuses={
                str(name): CompartmentStatus.from_json(body)
                for name, body in _mapping(raw.get("compartmentStatuses")).items()
            },
            conditions=tuple(c for c in raw.get("conditions") or () if isinstance(c, Mapping))
            if isinstance(raw.get("conditions"), list)
            else (),
            document=raw,
        )

    def condition(self, kind: str) -> Mapping[str, Any] | None:
        """The condition of type `kind`, if the status has one."""
        return next((c for c in self.conditions if c.get("type") == kind), None)

    def to_json(self) -> dict[str, Any]:
        """The status as stored."""
        return dict(self.document)
