"""How the "agent image" runs our agent inside a simulated container.

Stage pods mount the node's host root at /root, which hides the machine's own /root, and a
pyenv Python (and any virtualenv made from it) lives there. So containers use the distro's
Python of the same minor version (same ABI, so compiled extensions load) with PYTHONPATH set
to the import roots of the agent, the shared schemas and their dependencies, all of which
must live outside /root.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import sys
from functools import cache
from importlib import metadata
from pathlib import Path

HIDDEN_BY_STAGE_PODS = Path("/root")
_REQUIREMENT_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


class AgentImageError(RuntimeError):
    """The agent cannot be made runnable inside containers; the message says why."""


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_closure(root: str) -> list[str]:
    seen: list[str] = []
    pending = [root]
    while pending:
        name = _normalise(pending.pop())
        if name in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        seen.append(name)
        for requirement in dist.requires or []:
            if "extra ==" in requirement:
                continue
            match = _REQUIREMENT_NAME.match(requirement)
            if match:
                pending.append(match.group(1))
    return seen


def _import_root(module: str) -> Path | None:
    spec = importlib.util.find_spec(module)
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations))).resolve().parent
    if spec.origin and spec.origin not in ("built-in", "frozen"):
        return Path(spec.origin).resolve().parent
    return None


def _is_hidden(path: Path) -> bool:
    return path == HIDDEN_BY_STAGE_PODS or HIDDEN_BY_STAGE_PODS in path.parents


@cache
def agent_pythonpath(distribution: str = "skyhook-agent") -> tuple[str, ...]:
    """Import roots that make `python -m skyhook_agent.controller` work, in sys.path order."""
    owners = metadata.packages_distributions()
    closure = _requirement_closure(distribution)
    if not closure:
        raise AgentImageError(f"{distribution} is not installed in {sys.prefix}")
    modules = {m for m, dists in owners.items() if {_normalise(d) for d in dists} & set(closure)}
    modules |= {name.replace("-", "_") for name in closure}
    roots: list[Path] = []
    for module in sorted(modules):
        if module.startswith("_") or module.startswith("__editable__"):
            continue
        root = _import_root(module)
        if root is None or root in roots:
            continue
        if _is_hidden(root):
            raise AgentImageError(
                f"the agent image needs {root} (module {module}), but stage pods mount the node's "
                f"host root at /root, which hides it; install the sandbox in a virtualenv "
                f"outside /root (e.g. tox's .tox/ or /tmp/venv)"
            )
        roots.append(root)
    order = {Path(entry).resolve(): i for i, entry in enumerate(sys.path) if entry}
    roots.sort(key=lambda root: order.get(root, -1))
    return tuple(str(root) for root in roots)


@cache
def container_python() -> str:
    """A Python interpreter of our minor version that lives outside /root."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    candidates = [f"/usr/bin/python{version}", f"/usr/local/bin/python{version}"]
    current = Path(sys.executable)
    if not _is_hidden(current.resolve()):
        candidates.insert(0, str(current))
    for candidate in candidates:
        if Path(candidate).exists():
            return candidate
    found = shutil.which(f"python{version}")
    if found and not _is_hidden(Path(found).resolve()):
        return found
    raise AgentImageError(
        f"no python{version} outside /root for the agent image (tried {', '.join(candidates)}); "
        f"install the distro's python{version} (apt-get install python{version})"
    )


def agent_image_env() -> dict[str, str]:
    return {
        "PYTHONPATH": ":".join(agent_pythonpath()),
        "PYTHONNOUSERSITE": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
