"""Which interrupt a node gets: config interrupts by changed configMap keys, then merging.

Pure functions over CR-level interrupts (``reboot``, ``service``, ``restartAllServices``,
``noop``), with upstream's rules: when a package has changed configMap keys, only the
``configInterrupts`` whose key (or glob) matches a changed key apply and the package's own
``interrupt`` is ignored; otherwise the package ``interrupt`` applies. Several interrupts merge
into the highest-priority one; service restarts of equal priority union their services.
"""

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache

from skyhook_agent.interrupts import encode_interrupt

PRIORITY = {"reboot": 3, "restartAllServices": 2, "service": 1, "noop": 0}
AGENT_TYPES = {
    "reboot": "node_restart",
    "service": "service_restart",
    "restartAllServices": "restart_all_services",
    "noop": "no_op",
}


@dataclass(frozen=True)
class CRInterrupt:
    """A Skyhook CR ``interrupt``: ``type`` from the CRD enum, ``services`` for ``service``."""

    type: str
    services: tuple[str, ...] = ()

    def agent_payload(self) -> str:
        """The base64 argument an interrupt pod passes to the agent."""
        fields = {"services": list(self.services)} if self.services else {}
        return encode_interrupt(AGENT_TYPES[self.type], **fields)


@cache
def _glob_regex(pattern: str) -> re.Pattern[str]:
    # Go's filepath.Match: '*' and '?' never match '/', '[...]' is a class ('^' negates).
    out, i = [], 0
    while i < len(pattern):
        char = pattern[i]
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[" and "]" in pattern[i + 1 :]:
            end = pattern.index("]", i + 1)
            out.append(f"[{pattern[i + 1 : end]}]")
            i = end
        else:
            out.append(re.escape(char))
        i += 1
    return re.compile("".join(out))


def key_matches(pattern: str, key: str) -> bool:
    return _glob_regex(pattern).fullmatch(key) is not None


def package_interrupts(
    interrupt: CRInterrupt | None,
    config_interrupts: Mapping[str, CRInterrupt],
    changed_keys: Iterable[str],
) -> list[CRInterrupt]:
    """The interrupts one package asks for, given which of its configMap keys changed."""
    changed = list(changed_keys)
    if changed:
        return [
            action
            for pattern, action in sorted(config_interrupts.items())
            if any(key_matches(pattern, key) for key in changed)
        ]
    return [interrupt] if interrupt is not None else []


def merge(interrupts: Iterable[CRInterrupt]) -> CRInterrupt | None:
    """The single interrupt to perform: highest priority wins; services are unioned."""
    chosen: CRInterrupt | None = None
    for candidate in interrupts:
        if chosen is None or PRIORITY[candidate.type] > PRIORITY[chosen.type]:
            chosen = candidate
        elif candidate.type == chosen.type == "service":
            services = dict.fromkeys((*chosen.services, *candidate.services))
            chosen = CRInterrupt("service", tuple(services))
    return chosen
