"""The end-to-end scenarios, and the runner that plays them on any cluster through kubectl.

One list, run by both `ci/e2e-kind` (a kind cluster with the helm chart installed) and the
operator's sandbox integration suite (operator/tests/integration/test_shared_scenarios.py), so
the two cannot drift. The runner touches the cluster only through the Kubernetes API with the
kubeconfig it is given, and judges only what the API shows: the Skyhook's status, the nodes'
`nodeState_<scr>` annotations, `status_<scr>` labels, taints and cordon, and stage pods.

Nodes under test are those labelled `skyhook.nvidia.com/test-node=demo` (kind's workers, the
sandbox test's nodes). Each scenario deletes what it created when it passes; a failing one
leaves everything in place for diagnostics and stops the run.

    python3 ci/e2e/scenarios.py list                    name and summary of each scenario
    python3 ci/e2e/scenarios.py images [--kubeconfig K] image:version of every package used
    python3 ci/e2e/scenarios.py run [--kubeconfig K] [--timeout S] [NAME ...]

Standard library only (the e2e machine needs just python3 besides docker, kind, kubectl, helm).
The judging functions are pure so ci/tests can exercise them on recorded objects.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GROUP = "skyhook.nvidia.com"
API_VERSION = f"{GROUP}/v1alpha1"
NODE_LABEL = f"{GROUP}/test-node"
NODE_LABEL_VALUE = "demo"
SHELLSCRIPT = "ghcr.io/nvidia/skyhook-packages/shellscript"
REPO = Path(__file__).resolve().parents[2]
DEMO_SCR = REPO / "dev" / "src" / "skyhook_dev" / "demo-scr.yaml"
Obj = Mapping[str, Any]


# --- the scenario vocabulary -------------------------------------------------------------


@dataclass(frozen=True)
class Apply:
    """`kubectl apply` a manifest (a dict) or a file (a path relative to the repository)."""

    manifest: Obj | str


@dataclass(frozen=True)
class Refused:
    """`kubectl apply` must fail with a message holding every string of `naming`, and the
    object must not exist afterwards."""

    manifest: Obj
    naming: tuple[str, ...]


@dataclass(frozen=True)
class Patch:
    """A JSON merge patch of a Skyhook."""

    scr: str
    patch: Obj


@dataclass(frozen=True)
class Record:
    """From now on, keep every stage pod of `scr` and every version of the nodes under test."""

    scr: str


@dataclass(frozen=True)
class Complete:
    """Wait until the Skyhook says complete and every node under test has exactly the
    Skyhook's packages, each complete, status label complete, no taint of ours, no cordon."""

    scr: str


@dataclass(frozen=True)
class OnlyStages:
    """Since `Record`, every node under test ran a pod of each of `stages` and no other stage
    (waits until each node's pods were seen, then until complete)."""

    scr: str
    stages: tuple[str, ...]


@dataclass(frozen=True)
class AtMostAtOnce:
    """Since `Record`, never more than `count` nodes were in progress at the same time."""

    scr: str
    count: int


@dataclass(frozen=True)
class Delete:
    """Delete a Skyhook and wait until it is gone (its finalizer ran)."""

    scr: str


@dataclass(frozen=True)
class Clean:
    """Nothing of the deleted Skyhook is left: node keys, conditions, taints, cordon, pods,
    ConfigMaps."""

    scr: str


Step = Apply | Refused | Patch | Record | Complete | OnlyStages | AtMostAtOnce | Delete | Clean


@dataclass(frozen=True)
class Scenario:
    name: str
    summary: str
    steps: tuple[Step, ...]


def shellscript_scr(name: str, version: str, marker: str, **spec: Any) -> dict[str, Any]:
    """A Skyhook whose one shellscript package appends a line per step to `marker` on the host
    and checks it; quick (no sleeps) so the scenarios stay short."""
    scripts = {}
    for step in ("apply", "config"):
        scripts[f"{step}.sh"] = f"#!/bin/bash\necho {step} >> {marker}\n"
        scripts[f"{step}_check.sh"] = f"#!/bin/bash\ngrep -q {step} {marker}\n"
    return {
        "apiVersion": API_VERSION,
        "kind": "Skyhook",
        "metadata": {"name": name},
        "spec": {
            "nodeSelectors": {"matchLabels": {NODE_LABEL: NODE_LABEL_VALUE}},
            "packages": {"hello": {"version": version, "image": SHELLSCRIPT, "configMap": scripts}},
            **spec,
        },
    }


def _invalid_scr() -> dict[str, Any]:
    scr = shellscript_scr("e2e-invalid", "1.1.1", "/skyhook-e2e-invalid")
    scr["spec"]["packages"]["hello"]["dependsOn"] = {"absent": "1.0.0"}
    return scr


POLICY = {
    "apiVersion": API_VERSION,
    "kind": "DeploymentPolicy",
    "metadata": {"name": "e2e-one-at-a-time"},
    "spec": {"default": {"budget": {"count": 1}, "strategy": {"fixed": {}}}},
}

SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "demo-rollout",
        "the demo SCR, unchanged, completes on every labelled node",
        (Apply(str(DEMO_SCR.relative_to(REPO))), Complete("demo")),
    ),
    Scenario(
        "config-edit-reruns-config-only",
        "a configMap edit runs the config stage again on every node, and not apply",
        (
            Apply(shellscript_scr("e2e-config", "1.1.1", "/skyhook-e2e-config")),
            Complete("e2e-config"),
            Record("e2e-config"),
            Patch(
                "e2e-config",
                {
                    "spec": {
                        "packages": {
                            "hello": {
                                "configMap": {
                                    "config.sh": "#!/bin/bash\n"
                                    "echo config again >> /skyhook-e2e-config\n"
                                }
                            }
                        }
                    }
                },
            ),
            OnlyStages("e2e-config", ("config",)),
        ),
    ),
    Scenario(
        "version-upgrade",
        "raising the package version completes with only the new version on every node",
        (
            Apply(shellscript_scr("e2e-upgrade", "1.1.0", "/skyhook-e2e-upgrade")),
            Complete("e2e-upgrade"),
            Apply(shellscript_scr("e2e-upgrade", "1.1.1", "/skyhook-e2e-upgrade")),
            Complete("e2e-upgrade"),
        ),
    ),
    Scenario(
        "invalid-scr-refused",
        "kubectl apply of an invalid SCR is refused by the admission webhook naming the field",
        (
            Refused(
                _invalid_scr(),
                (
                    'admission webhook "validate-skyhook.nvidia.com" denied the request',
                    "spec.packages.hello.dependsOn.absent",
                ),
            ),
        ),
    ),
    Scenario(
        "delete-leaves-nodes-clean",
        "deleting a completed SCR leaves no annotation, label, condition, taint or cordon",
        (
            Apply(shellscript_scr("e2e-delete", "1.1.1", "/skyhook-e2e-delete")),
            Complete("e2e-delete"),
            Delete("e2e-delete"),
            Clean("e2e-delete"),
        ),
    ),
    Scenario(
        "policy-rollout",
        "a DeploymentPolicy with budget count 1 rolls out one node at a time to completion",
        (
            Apply(POLICY),
            Record("e2e-policy"),
            Apply(
                shellscript_scr(
                    "e2e-policy",
                    "1.1.1",
                    "/skyhook-e2e-policy",
                    deploymentPolicy=POLICY["metadata"]["name"],
                )
            ),
            Complete("e2e-policy"),
            AtMostAtOnce("e2e-policy", 1),
        ),
    ),
)


# --- judging (pure) ----------------------------------------------------------------------


def under_test(nodes: Sequence[Obj]) -> list[Obj]:
    return [
        n for n in nodes if (n["metadata"].get("labels") or {}).get(NODE_LABEL) == NODE_LABEL_VALUE
    ]


def ours(taint: Obj) -> bool:
    return str(taint.get("key", "")).startswith(GROUP)


def completion_problems(scr: Obj, nodes: Sequence[Obj]) -> list[str]:
    """Why the Skyhook is not complete on every node under test; empty when it is."""
    name = scr["metadata"]["name"]
    expected = {f"{key}|{p['version']}" for key, p in scr["spec"]["packages"].items()}
    status = (scr.get("status") or {}).get("status")
    problems = [] if status == "complete" else [f"Skyhook {name} status is {status!r}"]
    chosen = under_test(nodes)
    if not chosen:
        return [*problems, f"no node is labelled {NODE_LABEL}={NODE_LABEL_VALUE}"]
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
        label = (meta.get("labels") or {}).get(f"{GROUP}/status_{name}")
        if label != "complete":
            problems.append(f"{meta['name']}: label {GROUP}/status_{name} is {label!r}")
        problems += [
            f"{meta['name']}: taint {t['key']} still set"
            for t in (node.get("spec") or {}).get("taints") or []
            if ours(t)
        ]
        if (node.get("spec") or {}).get("unschedulable"):
            problems.append(f"{meta['name']}: still cordoned")
    return problems


def leftover_problems(name: str, nodes: Sequence[Obj], objects: Sequence[Obj]) -> list[str]:
    """What the deleted Skyhook left on nodes, or as pods/ConfigMaps; empty when clean."""
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
        problems += [
            f"{meta['name']}: taint {t['key']} left"
            for t in (node.get("spec") or {}).get("taints") or []
            if ours(t)
        ]
        if (node.get("spec") or {}).get("unschedulable"):
            problems.append(f"{meta['name']}: still cordoned")
    problems += [
        f"{obj['kind']} {obj['metadata'].get('namespace')}/{obj['metadata']['name']} left"
        for obj in objects
    ]
    return problems


def pod_stage(pod: Obj) -> str:
    text = (pod["metadata"].get("annotations") or {}).get(f"{GROUP}/package", "{}")
    return str(json.loads(text).get("stage", ""))


def stage_problems(
    pods: Sequence[Obj], nodes: Sequence[str], stages: Sequence[str], *, final: bool
) -> list[str]:
    """Which nodes have not run a pod of each of `stages`, and (when `final`) which pods ran
    another stage; `pods` are the pods created since recording started."""
    seen: dict[str, set[str]] = {}
    for pod in pods:
        seen.setdefault(pod["spec"].get("nodeName", ""), set()).add(pod_stage(pod))
    problems = [
        f"{node}: no {stage} pod ran"
        for node in nodes
        for stage in stages
        if stage not in seen.get(node, set())
    ]
    if final:
        problems += [
            f"{node}: a pod of stage {stage} ran"
            for node, found in sorted(seen.items())
            for stage in sorted(found - set(stages))
        ]
    return problems


def peak_in_progress(scr: str, versions: Sequence[Obj]) -> int:
    """The most nodes whose status for `scr` was in_progress at once, over node versions in
    arrival order."""
    running: dict[str, bool] = {}
    peak = 0
    for node in versions:
        labels = node["metadata"].get("labels") or {}
        running[node["metadata"]["name"]] = labels.get(f"{GROUP}/status_{scr}") == "in_progress"
        peak = max(peak, sum(running.values()))
    return peak


# --- the cluster, through kubectl -------------------------------------------------------


class StepFailed(Exception):
    pass


@dataclass
class Kubectl:
    kubeconfig: str | None = None

    def argv(self, *args: str) -> list[str]:
        config = ["--kubeconfig", self.kubeconfig] if self.kubeconfig else []
        return ["kubectl", *config, *args]

    def run(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(*args), input=stdin, capture_output=True, text=True)

    def ok(self, *args: str, stdin: str | None = None) -> str:
        result = self.run(*args, stdin=stdin)
        if result.returncode != 0:
            raise StepFailed(f"kubectl {' '.join(args)}: {result.stderr.strip()}")
        return result.stdout

    def json(self, *args: str) -> Any:
        return json.loads(self.ok(*args, "-o", "json"))

    def raw(self, path: str, **query: str) -> Any:
        return json.loads(self.ok("get", "--raw", f"{path}?{urllib.parse.urlencode(query)}"))


class Watch:
    """Every object of a list path from now on, as `kubectl get --raw` streams a watch that
    starts at the list's resourceVersion (so nothing created after construction is missed)."""

    def __init__(self, kubectl: Kubectl, path: str, selector: str) -> None:
        version = kubectl.raw(path, labelSelector=selector)["metadata"]["resourceVersion"]
        query = urllib.parse.urlencode(
            {"watch": "1", "resourceVersion": version, "labelSelector": selector}
        )
        self.what = f"{path} watch ({selector})"
        self.events: list[tuple[str, Obj]] = []
        self._lock = threading.Lock()
        self._process = subprocess.Popen(
            kubectl.argv("get", "--raw", f"{path}?{query}"),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            if line.strip():
                event = json.loads(line)
                with self._lock:
                    self.events.append((event["type"], event["object"]))

    def objects(self, kinds: tuple[str, ...] = ("ADDED", "MODIFIED")) -> list[Obj]:
        """What arrived so far; fails if the watch ended, since events may be missing."""
        if self._process.poll() is not None:
            raise StepFailed(f"the {self.what} ended early")
        with self._lock:
            errors = [obj for kind, obj in self.events if kind == "ERROR"]
            if errors:
                raise StepFailed(f"the {self.what} reported an error: {errors[0]}")
            return [obj for kind, obj in self.events if kind in kinds]

    def stop(self) -> None:
        self._process.terminate()
        self._process.wait()


def wait_for(problems: Callable[[], list[str]], timeout: float, what: str) -> None:
    """Ask until there are no problems; fail naming the last ones when `timeout` passes."""
    deadline = time.monotonic() + timeout
    found = problems()
    while found:
        if time.monotonic() > deadline:
            raise StepFailed(f"{what} not reached in {timeout:.0f}s:\n  " + "\n  ".join(found))
        time.sleep(1)
        found = problems()


@dataclass
class Runner:
    kubectl: Kubectl
    timeout: float = 300
    created: list[tuple[str, str]] = field(default_factory=list)
    pods: dict[str, Watch] = field(default_factory=dict)
    nodes: dict[str, Watch] = field(default_factory=dict)

    def nodes_now(self) -> list[Obj]:
        return list(self.kubectl.json("get", "nodes")["items"])

    def node_names(self) -> list[str]:
        return sorted(n["metadata"]["name"] for n in under_test(self.nodes_now()))

    def scr(self, name: str) -> Obj:
        return dict(self.kubectl.json("get", f"skyhooks.{GROUP}", name))

    def step(self, step: Step) -> None:
        match step:
            case Apply(manifest):
                self.apply(manifest)
            case Refused(manifest, naming):
                self.refused(manifest, naming)
            case Patch(scr, patch):
                self.kubectl.ok(
                    "patch", f"skyhooks.{GROUP}", scr, "--type=merge", "-p", json.dumps(patch)
                )
            case Record(scr):
                selector = f"{NODE_LABEL}={NODE_LABEL_VALUE}"
                self.nodes[scr] = Watch(self.kubectl, "/api/v1/nodes", selector)
                self.pods[scr] = Watch(self.kubectl, "/api/v1/pods", f"{GROUP}/name={scr}")
            case Complete(scr):
                wait_for(
                    lambda: completion_problems(self.scr(scr), self.nodes_now()),
                    self.timeout,
                    f"{scr} complete",
                )
            case OnlyStages(scr, stages):
                names = self.node_names()
                added = lambda: self.pods[scr].objects(("ADDED",))  # noqa: E731
                wait_for(
                    lambda: stage_problems(added(), names, stages, final=False),
                    self.timeout,
                    f"{'/'.join(stages)} pods of {scr} on every node",
                )
                self.step(Complete(scr))
                wait_for(
                    lambda: stage_problems(added(), names, stages, final=True),
                    0,
                    f"only {'/'.join(stages)} pods of {scr}",
                )
            case AtMostAtOnce(scr, count):
                peak = peak_in_progress(scr, self.nodes[scr].objects())
                if peak > count:
                    raise StepFailed(
                        f"{peak} nodes were in progress with {scr} at once (at most {count})"
                    )
            case Delete(scr):
                self.kubectl.ok(
                    "delete", f"skyhooks.{GROUP}", scr, "--wait", f"--timeout={self.timeout}s"
                )
            case Clean(scr):
                wait_for(lambda: self.leftovers(scr), 60, f"nothing of {scr} left")

    def apply(self, manifest: Obj | str) -> None:
        if isinstance(manifest, str):
            obj = self.kubectl.json("create", "--dry-run=client", "-f", str(REPO / manifest))
            self.kubectl.ok("apply", "-f", str(REPO / manifest))
        else:
            obj = manifest
            self.kubectl.ok("apply", "-f", "-", stdin=json.dumps(manifest))
        if (obj["kind"], obj["metadata"]["name"]) not in self.created:
            self.created.append((obj["kind"], obj["metadata"]["name"]))

    def refused(self, manifest: Obj, naming: Sequence[str]) -> None:
        result = self.kubectl.run("apply", "-f", "-", stdin=json.dumps(manifest))
        name = manifest["metadata"]["name"]
        if result.returncode == 0:
            self.created.append((manifest["kind"], name))
            raise StepFailed(f"kubectl apply of {name} was accepted")
        missing = [text for text in naming if text not in result.stderr]
        if missing:
            raise StepFailed(f"refusal of {name} lacks {missing}: {result.stderr.strip()}")
        found = self.kubectl.run("get", f"skyhooks.{GROUP}", name)
        if found.returncode == 0:
            raise StepFailed(f"refused Skyhook {name} exists anyway")

    def leftovers(self, name: str) -> list[str]:
        labelled = [
            *self.kubectl.json("get", "pods,configmaps", "-A", "-l", f"{GROUP}/name={name}")[
                "items"
            ],
            *self.kubectl.json(
                "get", "configmaps", "-A", "-l", f"{GROUP}/skyhook-node-meta={name}"
            )["items"],
        ]
        return leftover_problems(name, under_test(self.nodes_now()), labelled)

    def play(self, scenario: Scenario) -> None:
        """Every step in order; raises StepFailed naming the first that failed."""
        for index, step in enumerate(scenario.steps, 1):
            try:
                self.step(step)
            except StepFailed as error:
                raise StepFailed(
                    f"{scenario.name} step {index} ({type(step).__name__}): {error}"
                ) from None

    def clean_up(self) -> None:
        """Stop watches; delete what the scenario created, newest first, and wait."""
        for watch in [*self.pods.values(), *self.nodes.values()]:
            watch.stop()
        self.pods.clear()
        self.nodes.clear()
        for kind, name in reversed(self.created):
            resource = {"Skyhook": "skyhooks", "DeploymentPolicy": "deploymentpolicies"}[kind]
            self.kubectl.ok(
                "delete", f"{resource}.{GROUP}", name, "--ignore-not-found", "--wait",
                f"--timeout={self.timeout}s",
            )  # fmt: skip
        self.created.clear()


def scenario_named(name: str) -> Scenario:
    for scenario in SCENARIOS:
        if scenario.name == name:
            return scenario
    names = ", ".join(s.name for s in SCENARIOS)
    raise SystemExit(f"scenarios.py: no scenario {name!r} (there are: {names})")


def package_images(kubectl: Kubectl) -> list[str]:
    """image:version of every package any scenario applies, each once, in order."""
    found: list[str] = []
    for scenario in SCENARIOS:
        for step in scenario.steps:
            if not isinstance(step, Apply):
                continue
            obj = step.manifest
            if isinstance(obj, str):
                obj = kubectl.json("create", "--dry-run=client", "-f", str(REPO / obj))
            packages = (obj.get("spec") or {}).get("packages") or {}
            found += [f"{p['image']}:{p['version']}" for p in packages.values()]
    return list(dict.fromkeys(found))


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="ci/e2e/scenarios.py", description=__doc__)
    parser.add_argument("command", choices=("list", "images", "run"))
    parser.add_argument("names", nargs="*", help="scenarios to run (default: all)")
    parser.add_argument("--kubeconfig", help="default: kubectl's own ($KUBECONFIG, ~/.kube)")
    parser.add_argument(
        "--timeout", type=float, default=300, help="seconds each wait may take (default 300)"
    )
    args = parser.parse_args(argv)
    kubectl = Kubectl(args.kubeconfig)
    if args.command == "list":
        for scenario in SCENARIOS:
            print(f"{scenario.name}\t{scenario.summary}")
        return 0
    if args.command == "images":
        print("\n".join(package_images(kubectl)))
        return 0
    runner = Runner(kubectl, timeout=args.timeout)
    for scenario in [scenario_named(n) for n in args.names] or SCENARIOS:
        started = time.monotonic()
        print(f"== scenario {scenario.name}: {scenario.summary}", flush=True)
        try:
            runner.play(scenario)
        except StepFailed as error:
            print(f"FAIL {error}", file=sys.stderr)
            return 1
        runner.clean_up()
        print(f"ok: {scenario.name} ({time.monotonic() - started:.0f}s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
