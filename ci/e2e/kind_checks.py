"""Checks ci/e2e-kind runs against the kind cluster, on the JSON `kubectl` returns.

    python3 ci/e2e/kind_checks.py package-images SCR_FILE   image:version per package of an SCR
    python3 ci/e2e/kind_checks.py complete SCR_NAME          every selected node finished it
    python3 ci/e2e/kind_checks.py clean SCR_NAME             nothing of the SCR is left

`complete` and `clean` look again every 2 s for up to 60 s: the operator's last writes (node
conditions, ConfigMap deletions) may land just after the SCR's status or deletion is visible.

Standard library only (the e2e machine needs just python3 besides docker, kind, kubectl, helm).
The judging functions are pure so ci/tests can exercise them on recorded objects.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

GROUP = "skyhook.nvidia.com"
SETTLE_SECONDS = 60.0
Obj = Mapping[str, Any]


def kubectl_json(*args: str) -> Any:
    output = subprocess.run(
        ["kubectl", *args, "-o", "json"], capture_output=True, text=True, check=True
    ).stdout
    return json.loads(output)


def package_images(scr: Obj) -> list[str]:
    """The package images an SCR runs, as image:version (what the stage pods pull)."""
    return [f"{p['image']}:{p['version']}" for p in scr["spec"]["packages"].values()]


def selected_nodes(scr: Obj, nodes: Sequence[Obj]) -> list[Obj]:
    """Nodes matching the SCR's nodeSelectors.matchLabels (the demo uses matchLabels only)."""
    wanted = (scr["spec"].get("nodeSelectors") or {}).get("matchLabels") or {}
    return [
        node for node in nodes if wanted.items() <= (node["metadata"].get("labels") or {}).items()
    ]


def completion_problems(scr: Obj, nodes: Sequence[Obj]) -> list[str]:
    """Why the SCR is not complete on every selected node; empty when it is."""
    name = scr["metadata"]["name"]
    expected = {f"{key}|{p['version']}" for key, p in scr["spec"]["packages"].items()}
    chosen = selected_nodes(scr, nodes)
    if not chosen:
        return [f"no node matches the nodeSelectors of {name}"]
    problems = []
    for node in chosen:
        meta = node["metadata"]
        raw = (meta.get("annotations") or {}).get(f"{GROUP}/nodeState_{name}")
        if raw is None:
            problems.append(f"{meta['name']}: no {GROUP}/nodeState_{name} annotation")
            continue
        state = json.loads(raw)
        if set(state) != expected:
            problems.append(
                f"{meta['name']}: nodeState has {sorted(state)}, want {sorted(expected)}"
            )
        problems += [
            f"{meta['name']}: {key} is {entry.get('stage')}/{entry.get('state')}, not complete"
            for key, entry in sorted(state.items())
            if entry.get("state") != "complete"
        ]
        status = (meta.get("labels") or {}).get(f"{GROUP}/status_{name}")
        if status != "complete":
            problems.append(f"{meta['name']}: label {GROUP}/status_{name} is {status!r}")
    return problems


def leftover_problems(name: str, nodes: Sequence[Obj], objects: Sequence[Obj]) -> list[str]:
    """What the deleted SCR left behind on nodes, or as pods/ConfigMaps; empty when clean."""
    problems = []
    for node in nodes:
        meta = node["metadata"]
        for kind in ("annotations", "labels"):
            problems += [
                f"{meta['name']}: {kind[:-1]} {key} left"
                for key in (meta.get(kind) or {})
                if key.startswith(f"{GROUP}/") and key.endswith(f"_{name}")
            ]
        problems += [
            f"{meta['name']}: condition {condition['type']} left"
            for condition in (node.get("status") or {}).get("conditions") or []
            if condition["type"].startswith(f"{GROUP}/{name}/")
        ]
        if (node.get("spec") or {}).get("unschedulable"):
            problems.append(f"{meta['name']}: still cordoned")
    problems += [
        f"{obj['kind']} {obj['metadata'].get('namespace')}/{obj['metadata']['name']} left"
        for obj in objects
    ]
    return problems


def settle(problems: Callable[[], list[str]], timeout: float = SETTLE_SECONDS) -> list[str]:
    """Ask again until there are no problems or `timeout` passed; the last answer."""
    deadline = time.monotonic() + timeout
    found = problems()
    while found and time.monotonic() < deadline:
        time.sleep(2)
        found = problems()
    return found


def report(problems: list[str], success: str) -> int:
    for problem in problems:
        print(f"FAIL {problem}", file=sys.stderr)
    if not problems:
        print(f"ok: {success}")
    return 1 if problems else 0


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="ci/e2e/kind_checks.py", description=__doc__)
    parser.add_argument("command", choices=("package-images", "complete", "clean"))
    parser.add_argument("target", help="SCR file (package-images) or SCR name")
    parser.add_argument(
        "--settle", type=float, default=SETTLE_SECONDS, help="seconds to keep asking (default 60)"
    )
    args = parser.parse_args(argv)
    if args.command == "package-images":
        # kubectl turns the YAML into JSON client-side, so no YAML library is needed.
        scr = kubectl_json("create", "--dry-run=client", "-f", args.target)
        print("\n".join(package_images(scr)))
        return 0
    name = args.target
    if args.command == "complete":
        found = settle(lambda: completion_now(name), args.settle)
        return report(found, f"{name} complete on every selected node")
    return report(settle(lambda: leftovers_now(name), args.settle), f"nothing of {name} is left")


def completion_now(name: str) -> list[str]:
    scr = kubectl_json("get", f"skyhooks.{GROUP}", name)
    return completion_problems(scr, kubectl_json("get", "nodes")["items"])


def leftovers_now(name: str) -> list[str]:
    labelled = [
        *kubectl_json("get", "pods,configmaps", "-A", "-l", f"{GROUP}/name={name}")["items"],
        *kubectl_json("get", "configmaps", "-A", "-l", f"{GROUP}/skyhook-node-meta={name}")[
            "items"
        ],
    ]
    return leftover_problems(name, kubectl_json("get", "nodes")["items"], labelled)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
