"""One interrupt per node: merge what the due packages ask for.

reboot > restartAllServices > service > noop; service interrupts merge by unioning their
services (sorted). The package that contributes the winning interrupt first, in name order,
is the one that carries the interrupt pod.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from skyhook_planner.model.spec import Interrupt, Package

PRIORITY = {"noop": 0, "service": 1, "restartAllServices": 2, "reboot": 3}


def wanted_interrupts(package: Package, config_updates: Sequence[str]) -> tuple[Interrupt, ...]:
    """What this package asks for: its configInterrupts matching changed config keys while a
    config change is being rolled out, otherwise its own `interrupt`."""
    if config_updates:
        found: list[Interrupt] = []
        for pattern in sorted(package.config_interrupts):
            if any(fnmatch.fnmatchcase(key, pattern) for key in config_updates):
                interrupt = package.config_interrupts[pattern]
                if interrupt not in found:
                    found.append(interrupt)
        return tuple(found)
    return (package.interrupt,) if package.interrupt is not None else ()


def has_interrupt(package: Package, config_updates: Sequence[str]) -> bool:
    return bool(wanted_interrupts(package, config_updates))


@dataclass(frozen=True)
class MergedInterrupt:
    interrupt: Interrupt
    chosen: Package  # runs the interrupt pod
    covered: tuple[Package, ...]  # every package whose interrupt this one satisfies


def merge(
    packages: Iterable[Package], config_updates: Mapping[str, Sequence[str]]
) -> MergedInterrupt | None:
    result: Interrupt | None = None
    chosen: Package | None = None
    covered: list[Package] = []
    for package in sorted(packages, key=lambda p: p.name):
        wanted = wanted_interrupts(package, config_updates.get(package.name, ()))
        if wanted:
            covered.append(package)
        for interrupt in wanted:
            if result is None or PRIORITY[interrupt.type] > PRIORITY[result.type]:
                result, chosen = interrupt, package
            elif result.type == "service" and interrupt.type == "service":
                services = tuple(sorted(set(result.services) | set(interrupt.services)))
                result = Interrupt("service", services)
    if result is None or chosen is None:
        return None
    return MergedInterrupt(result, chosen, tuple(covered))
