"""Sandbox scale: seconds until N simulated nodes are Ready, and the sandbox's memory.

    python benchmarks/sandbox_scale.py [--nodes 200] [--pods-per-node 0]

Starts a fresh sandbox (reusing the cached control-plane binaries), adds N nodes, and reports
the time until every node is Ready with its not-ready taint lifted (what the operator waits
for), then the resident memory of each sandbox process tree. With --pods-per-node, also the
time until that many pause pods per node are Running.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import urllib.request
from pathlib import Path

from skyhook_sandbox import kubeapi
from skyhook_sandbox.sandbox import Sandbox


def mib(value: int) -> str:
    return f"{value / 1024 / 1024:.0f} MiB"


def running_pods(sandbox: Sandbox) -> int:
    pods = kubeapi.get(sandbox, "/api/v1/namespaces/default/pods")["items"]
    return sum(1 for pod in pods if (pod.get("status") or {}).get("phase") == "Running")


def create_pods(sandbox: Sandbox, names: list[str], per_node: int) -> None:
    token, context = kubeapi._credentials(sandbox)
    for node in names:
        for index in range(per_node):
            body = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"{node}-p{index}"},
                "spec": {"nodeName": node,
                         "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]},
            }  # fmt: skip
            request = urllib.request.Request(
                sandbox.server + "/api/v1/namespaces/default/pods",
                data=json.dumps(body).encode(),
                headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
                method="POST",
            )
            urllib.request.urlopen(request, context=context, timeout=30).read()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--pods-per-node", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="skyhook-bench-", dir="/var/tmp") as state:
        started = time.monotonic()
        with Sandbox(Path(state)) as sandbox:
            control_plane = time.monotonic() - started
            print(f"control plane ready in {control_plane:.1f} s")
            rss_idle = sandbox.rss_bytes()
            started = time.monotonic()
            names = sandbox.add_nodes(args.nodes, prefix="bench", wait_ready=False)
            registered = time.monotonic() - started
            sandbox.wait_ready(names, timeout=600)
            ready = time.monotonic() - started
            print(
                f"{args.nodes} nodes registered in {registered:.1f} s, all Ready in {ready:.1f} s"
            )
            time.sleep(12)  # a full lease-renewal round, so memory includes steady state
            rss = sandbox.rss_bytes()
            if args.pods_per_node:
                total = args.nodes * args.pods_per_node
                started = time.monotonic()
                create_pods(sandbox, names, args.pods_per_node)
                deadline = time.monotonic() + 600
                while running_pods(sandbox) < total and time.monotonic() < deadline:
                    time.sleep(1)
                print(f"{total} pause pods Running in {time.monotonic() - started:.1f} s")
                rss = sandbox.rss_bytes()
            print("memory (RSS, process trees):")
            for name, value in rss.items():
                print(
                    f"  {name:<24} {mib(value):>9}   (idle before nodes: {mib(rss_idle.get(name, 0))})"
                )
            print(f"  {'total':<24} {mib(sum(rss.values())):>9}")
            print(f"  node host per node       {rss['nodehost'] / args.nodes / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
