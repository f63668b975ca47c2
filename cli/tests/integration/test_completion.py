"""Shell completion and `-o name` against the sandbox: the names completion offers, and those
-o name prints, are the cluster's, as kubectl reads them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from skyhook_schemas import keys

from ..conftest import Result, agentless, node_state

pytestmark = pytest.mark.sandbox

Cli = Callable[..., Result]
BIN = Path(sys.executable).parent  # the environment's console scripts


def kubectl(sandbox: Any, *args: str) -> str:
    done = subprocess.run(
        ["kubectl", "--kubeconfig", str(sandbox.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def listed_names(sandbox: Any, kind: str) -> list[str]:
    """kubectl's names of every object of `kind`, without the `kind/`."""
    return sorted(
        line.split("/", 1)[1] for line in kubectl(sandbox, "get", kind, "-o", "name").split()
    )


def completed(words: list[str], env: dict[str, str] | None = None) -> list[str]:
    """The candidates kubectl_complete-skyhook answers for `words` (checking the directive)."""
    done = subprocess.run(
        [BIN / "kubectl_complete-skyhook", *words],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    *lines, directive = done.stdout.splitlines()
    assert directive == ":4"
    return [line.split("\t")[0] for line in lines]


def test_completion_offers_the_clusters_node_and_skyhook_names(
    *,
    sandbox: Any,
    tmp_path: Path,
    nodes: Callable[[int], list[str]],
    skyhooks: Callable[..., dict[str, Any]],
    label: str,
) -> None:
    mine = nodes(2)
    skyhooks(label, {"aa": agentless("1.0.0")})
    config = ["--kubeconfig", str(sandbox.kubeconfig)]

    assert completed([*config, "node", "status", ""]) == listed_names(sandbox, "nodes")
    assert completed([*config, "node", "status", label]) == mine
    # A name already on the line is not offered again.
    assert completed([*config, "node", "ignore", mine[0], label]) == mine[1:]
    assert completed([*config, "package", "status", "--node", label]) == mine
    skyhook_names = listed_names(sandbox, keys.PLURAL + "." + keys.GROUP)
    assert label in skyhook_names
    assert completed(["node", "list", *config, "--skyhook", ""]) == skyhook_names
    assert completed(["node", "list", *config, "--skyhook=" + label[:5]]) == [
        n for n in skyhook_names if n.startswith(label[:5])
    ]
    assert completed([*config, "pause", label]) == [label]
    assert completed([*config, "pause", label, ""]) == []  # it takes one name

    # --context earlier on the line picks the context, as for every command; the current
    # context names an unreachable cluster: nothing is offered, and nothing is said.
    kubeconfig = yaml.safe_load(sandbox.kubeconfig.read_text())
    (real,) = kubeconfig["contexts"]
    kubeconfig["clusters"].append({"name": "gone", "cluster": {"server": "https://127.0.0.1:9"}})
    kubeconfig["contexts"].append(
        {"name": "stale", "context": {**real["context"], "cluster": "gone"}}
    )
    kubeconfig["current-context"] = "stale"
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig))
    stale = ["--kubeconfig", str(path)]
    assert completed([*stale, "node", "status", label]) == []
    assert completed([*stale, "--context", real["name"], "node", "status", label]) == mine
    assert completed(["node", "status", *stale, "--context", real["name"], label]) == mine


def kubectl_minor() -> int:
    done = subprocess.run(
        ["kubectl", "version", "--client", "-o", "json"], capture_output=True, text=True
    )
    version = json.loads(done.stdout)["clientVersion"]
    return int("".join(c for c in version["minor"] if c.isdigit()))


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_completes_the_plugin_through_its_completion_script(
    *, sandbox: Any, nodes: Callable[[int], list[str]], label: str
) -> None:
    if kubectl_minor() < 26:
        pytest.skip("kubectl before 1.26 does not complete plugins")
    mine = nodes(2)
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    env["KUBECONFIG"] = str(sandbox.kubeconfig)

    def through_kubectl(*words: str) -> list[str]:
        done = subprocess.run(
            ["kubectl", "__complete", "skyhook", *words],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        assert done.returncode == 0, done.stderr
        *lines, directive = done.stdout.splitlines()
        assert directive == ":4", done.stdout
        return [line.split("\t")[0] for line in lines]

    assert through_kubectl("node", "status", label) == mine
    assert completed(["node", "status", label], env=env) == mine  # KUBECONFIG, as kubectl's
    assert through_kubectl("node", "st") == ["status"]
    assert "--skyhook" in through_kubectl("node", "list", "--")


def test_name_output_prints_the_listed_nodes_as_kubectl_names_them(
    *,
    sandbox: Any,
    cli: Cli,
    core: client.CoreV1Api,
    nodes: Callable[[int], list[str]],
    skyhooks: Callable[..., dict[str, Any]],
    label: str,
) -> None:
    first, second, third = nodes(3)
    skyhooks(label, {"aa": agentless("1.0.0")})
    for node in (first, second):
        state = node_state(aa=("1.0.0", "config", "complete"))
        core.patch_node(node, {"metadata": {"annotations": {keys.node_state_key(label): state}}})
    other = label + "-other"  # a second Skyhook on the first node: still one line for it
    state = node_state(bb=("1.0.0", "apply", "in_progress"))
    core.patch_node(first, {"metadata": {"annotations": {keys.node_state_key(other): state}}})
    expected = kubectl(sandbox, "get", "nodes", first, second, "-o", "name")

    for args in (
        ["node", "list", "--skyhook", label],
        ["node", "status", label + ".*"],  # the third node shows no activity
        ["package", "status", "aa", "--skyhook", label],
    ):
        shown = cli(*args, "-o", "name")
        assert (shown.code, shown.out, shown.err) == (0, expected, ""), args
    assert cli("node", "status", third, "-o", "name").out == ""

    # Nothing to list: no names on stdout, the reason on stderr.
    empty = cli("node", "list", "--skyhook", label + "-none", "-o", "name")
    assert (empty.code, empty.out) == (0, "")
    assert empty.err == f'No nodes found for Skyhook "{label}-none"\n'
