"""The operator as the helm chart deploys it, run from outside a cluster (the sandbox).

`helm template` renders the chart with its default values; everything but the Deployment and
the webhook configurations (CRDs, ServiceAccount, roles, bindings, Services) is applied with
the admin kubeconfig. The Deployment's replicas then run as `skyhook-operator run` processes
with the Deployment's environment and a token of the chart's ServiceAccount, so every request
the operator makes is allowed by the chart's RBAC or answered Forbidden.

What running outside the cluster changes, and nothing else: the apiserver cannot reach the
chart's webhook Service, so the replicas serve the webhooks on one loopback address (as pods
behind one Service) and fill the chart's two configurations (made empty here, as the chart
makes them) with URL webhooks themselves (SKYHOOK_WEBHOOK_URL), as the chart's account allows; each replica binds its metrics and probe ports on its own loopback
port, keeps its certificates in its own directory, and holds the Lease under its own name, as
pods have their own network, filesystem and host name.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from skyhook_dev.harness import OperatorProcess
from skyhook_operator.settings import load_settings
from skyhook_sandbox.processes import free_port

RELEASE = "skyhook-operator"
NAMESPACE = "skyhook"
# Made by the chart for the apiserver to call the in-cluster Service; out of the cluster they
# are made empty and the operator fills them with webhooks calling a loopback URL.
WEBHOOK_CONFIGURATIONS = frozenset(
    {"ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"}
)
# The image's entry point, which OperatorProcess runs as `python -m skyhook_operator run`.
OPERATOR_COMMAND = (["skyhook-operator"], ["run"])
# Answers naming a refused request, in the operator's log lines.
FORBIDDEN_MARKS = ("Forbidden", " 403")
# Long enough for any run of the scenario list; a pod's projected token is renewed instead.
TOKEN_DURATION = "6h"


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    result = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout


def render(helm: Path, chart: Path) -> list[dict[str, Any]]:
    """The chart's objects with default values, as `helm install` would create them."""
    result = subprocess.run(
        [str(helm), "template", RELEASE, str(chart), "-n", NAMESPACE, "--no-hooks"],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise RuntimeError(f"helm template {chart} failed: {result.stderr.strip()}")
    return [document for document in yaml.safe_load_all(result.stdout) if document]


def account_kubeconfig(admin: Path, token: str, target: Path) -> Path:
    """The admin kubeconfig with its user replaced by the ServiceAccount's token."""
    config = yaml.safe_load(admin.read_text())
    for user in config["users"]:
        user["user"] = {"token": token}
    target.write_text(yaml.safe_dump(config))
    return target


def forbidden_lines(log: Path) -> list[str]:
    """The log lines that report a request the apiserver refused as Forbidden."""
    text = log.read_text(errors="replace") if log.exists() else ""
    return [line for line in text.splitlines() if any(mark in line for mark in FORBIDDEN_MARKS)]


@dataclass
class ChartDeployment:
    """The chart installed on a cluster and its Deployment's replicas running here."""

    helm: Path
    chart: Path
    admin: Path  # installs the chart and cleans up; the replicas never use it
    work: Path
    replicas: list[OperatorProcess] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    environment: dict[str, str] = field(default_factory=dict)
    service_account: str = ""

    def install(self) -> ChartDeployment:
        """Apply the chart's objects but the Deployment and webhook configurations; keep the
        Deployment's operator environment and replica count for `start`."""
        documents = render(self.helm, self.chart)
        deployment = next(d for d in documents if d["kind"] == "Deployment")
        pod = deployment["spec"]["template"]["spec"]
        container: dict[str, Any] = pod["containers"][0]
        if (container["command"], container["args"]) != OPERATOR_COMMAND:
            raise RuntimeError(
                f"the chart's operator container runs {container['command'] + container['args']}, "
                f"not {OPERATOR_COMMAND[0] + OPERATOR_COMMAND[1]} as this harness does"
            )
        self.environment = {variable["name"]: variable["value"] for variable in container["env"]}
        self.service_account = pod["serviceAccountName"]
        self.names = [
            f"{deployment['metadata']['name']}-{i}" for i in range(deployment["spec"]["replicas"])
        ]
        rest = [d for d in documents if d["kind"] not in {"Deployment", *WEBHOOK_CONFIGURATIONS}]
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        kubectl(self.admin, "apply", "--server-side", "-f", "-", stdin=yaml.safe_dump(namespace))
        kubectl(self.admin, "apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(rest))
        crds = [
            f"crd/{d['metadata']['name']}" for d in rest if d["kind"] == "CustomResourceDefinition"
        ]
        kubectl(self.admin, "wait", "--for=condition=Established", *crds, "--timeout=60s")
        # The chart creates its two configurations; its account may only patch them (by name).
        # Created empty here, the replicas fill them with webhooks calling their loopback URL.
        empty = [
            {
                "apiVersion": d["apiVersion"],
                "kind": d["kind"],
                "metadata": {"name": d["metadata"]["name"]},
                "webhooks": [],
            }
            for d in documents
            if d["kind"] in WEBHOOK_CONFIGURATIONS
        ]
        if empty:
            kubectl(
                self.admin, "apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(empty)
            )
        return self

    def start(self, ready_timeout: float = 120.0) -> ChartDeployment:
        """Every replica of the Deployment under the chart's ServiceAccount, each ready (its
        indexes full, the apiserver calling the webhooks), whether it leads or stands by."""
        account = self._account_kubeconfig()
        webhooks = f"127.0.0.1:{free_port()}"
        for name in self.names:
            metrics, probes = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
            env = self.environment | {
                "METRICS_PORT": metrics,
                "PROBE_PORT": probes,
                "SKYHOOK_WEBHOOK_PORT": webhooks,
                "SKYHOOK_WEBHOOK_URL": f"https://{webhooks}",
                "SKYHOOK_WEBHOOK_CERT_DIR": str(self.work / f"{name}-serving-certs"),
                "SKYHOOK_LEADER_IDENTITY": name,
            }
            replica = OperatorProcess(
                account,
                self.work / f"{name}.log",
                env=env,
                metrics_address=metrics,
                probe_address=probes,
                webhook_address=webhooks,
                cleanup_kubeconfig=self.admin,
            )
            self.replicas.append(replica.start())
        for replica in self.replicas:
            replica.wait_ready(ready_timeout)
        return self

    def _account_kubeconfig(self) -> Path:
        token = kubectl(
            self.admin,
            *("create", "token", self.service_account, "-n", NAMESPACE),
            f"--duration={TOKEN_DURATION}",
        ).strip()
        return account_kubeconfig(self.admin, token, self.work / "account.kubeconfig")

    def leader(self) -> str:
        """The replica holding the Lease as kubectl reads it ("" when none does)."""
        lease = load_settings(self.environment).lease_name
        holder = kubectl(
            self.admin,
            *("get", "lease", lease, "-n", NAMESPACE, "--ignore-not-found"),
            *("-o", "jsonpath={.spec.holderIdentity}"),
        )
        return holder.rsplit("_", 1)[0]  # the operator adds a suffix per start

    def forbidden(self) -> dict[str, list[str]]:
        """Each replica's log lines reporting a Forbidden answer (none: an empty dict)."""
        found = {str(r.log_path): forbidden_lines(r.log_path) for r in self.replicas}
        return {log: lines for log, lines in found.items() if lines}

    def stop(self) -> None:
        for replica in self.replicas:
            replica.terminate()
        for replica in self.replicas:
            replica.stop()

    def log_tails(self, lines: int = 40) -> str:
        return "\n".join(
            f"--- {replica.log_path.name} (tail) ---\n{replica.log_tail(lines)}"
            for replica in self.replicas
        )


def describe_forbidden(found: dict[str, list[str]], limit: int = 20) -> str:
    parts: list[str] = []
    for log, lines in found.items():
        shown: Sequence[str] = lines[:limit]
        more = f"\n  ... {len(lines) - limit} more" if len(lines) > limit else ""
        parts.append(f"{log}: {len(lines)} Forbidden lines\n  " + "\n  ".join(shown) + more)
    return "\n".join(parts)
