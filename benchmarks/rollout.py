"""Rollout time of the operator on a sandbox cluster, against the lower bound the budget allows.

N simulated nodes, one agentless package whose stage and check containers each sleep a fixed
SLEEP_LEN, an interruption budget of B nodes. Every node runs the stage chain apply -> config,
each stage pod running `<stage>` then `<stage>-check`, so one node needs at least
chain = 2 stages x 2 containers x SLEEP_LEN seconds, and no schedule can beat
lower bound = ceil(N / B) x chain. We print the measured time (SCR applied -> SCR complete),
that bound, and their ratio (target: <= 1.15 at N = 1000), plus the operator's CPU time and
memory, where the machine's CPU went during the rollout (apiserver, etcd, controller-manager,
node host with its containers, operator), and the API requests per node and stage: all of
them by verb and resource (the apiserver's own counters) and the operator's share (its log).
`--nodes` makes it smaller for a quick run.

    python benchmarks/rollout.py --nodes 1000 --budget 100 --sleep 5
"""

from __future__ import annotations

import argparse
import math
import os
import re
import tempfile
import time
from collections import Counter
from pathlib import Path

from skyhook_dev.harness import (
    OperatorProcess,
    apply_skyhook,
    ensure_namespace,
    install_crd,
    node_status,
    watch,
)
from skyhook_operator.kube.client import Kube, connect
from skyhook_sandbox.sandbox import Sandbox
from skyhook_schemas import keys

LABEL = "skyhook.nvidia.com/bench"
STAGES = ("apply", "config")
CONTAINERS_PER_STAGE = 2  # <stage> and <stage>-check; the copy container takes no SLEEP_LEN


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000, help="simulated nodes (default 1000)")
    parser.add_argument(
        "--budget", type=int, default=0, help="interruptionBudget.count (default N/10)"
    )
    parser.add_argument("--sleep", type=float, default=5.0, help="SLEEP_LEN of each container, s")
    parser.add_argument("--timeout", type=float, default=3600.0, help="give up after this many s")
    args = parser.parse_args()
    budget = args.budget or max(1, args.nodes // 10)
    chain = len(STAGES) * CONTAINERS_PER_STAGE * args.sleep
    bound = math.ceil(args.nodes / budget) * chain

    with tempfile.TemporaryDirectory(prefix="skyhook-bench-", dir="/var/tmp") as workdir:
        sandbox = Sandbox(Path(workdir) / "sandbox").start()
        try:
            started = time.monotonic()
            names = sandbox.add_nodes(
                args.nodes, labels={LABEL: "yes"}, prefix="bench", timeout=max(120.0, args.nodes)
            )
            print(f"{len(names)} nodes Ready in {time.monotonic() - started:.1f} s", flush=True)
            kube = connect(str(sandbox.kubeconfig))
            install_crd(kube)
            ensure_namespace(kube, "skyhook")
            operator = OperatorProcess(
                sandbox.kubeconfig,
                Path(workdir) / "operator.log",
                env={"SKYHOOK_LOG_LEVEL": "info"},
            ).start()
            operator.wait_ready()
            try:
                pids = _pids(sandbox, operator)
                cpu_before, requests_before = _cpu(pids), _apiserver_requests(kube)
                measured = _rollout(
                    kube,
                    names,
                    budget=budget,
                    sleep=args.sleep,
                    timeout=args.timeout,
                    operator=operator,
                )
                cpu_used = _cpu(pids) - cpu_before
                requests = _apiserver_requests(kube) - requests_before
                cpu, rss = _usage(operator)
                events = _events(kube)
            finally:
                operator.stop()
            log = (Path(workdir) / "operator.log").read_text(errors="replace")
            passes = _pass_stats(log)
        finally:
            sandbox.stop()

    print(f"nodes {args.nodes}, budget {budget}, SLEEP_LEN {args.sleep:g} s, chain {chain:g} s")
    print(f"rollout time       {measured:8.1f} s")
    print(f"lower bound        {bound:8.1f} s  (ceil({args.nodes}/{budget}) x {chain:g} s)")
    print(f"ratio              {measured / bound:8.3f}  (target <= 1.15)")
    print(f"operator CPU time  {cpu:8.1f} s   peak RSS {rss / 2**20:.0f} MiB")
    print(passes)
    print("CPU s during the rollout: " + ", ".join(f"{k} {v:.0f}" for k, v in cpu_used.items()))
    stages = args.nodes * len(STAGES)
    print(f"apiserver requests per node and stage: {requests.total() / stages:.1f}")
    print("  " + _per_stage(requests, stages))
    print(events)
    ours = _operator_requests(log)
    print(f"operator requests per node and stage: {ours.total() / stages:.1f}")
    print("  " + _per_stage(ours, stages))
    return 0


def _events(kube: Kube) -> str:
    """The operator's Events: objects stored, and the occurrences their counts add up to."""
    items = kube.request("GET", "/api/v1/namespaces/default/events")["items"]
    ours = [e for e in items if (e.get("source") or {}).get("component") == "skyhook-controller"]
    occurrences = sum(int(e.get("count") or 1) for e in ours)
    return f"Events: {len(ours)} objects for {occurrences} occurrences"


def _per_stage(counts: Counter[str], stages: int, top: int = 14) -> str:
    return ", ".join(f"{what} {n / stages:.2f}" for what, n in counts.most_common(top))


def _rollout(
    kube: Kube,
    names: list[str],
    *,
    budget: int,
    sleep: float,
    timeout: float,
    operator: OperatorProcess,
) -> float:
    package = {
        "version": "1.0.0",
        "image": "ghcr.io/nvidia/skyhook-packages/shellscript",
        "agentImageOverride": "ghcr.io/nvidia/skyhook/agentless:bench",
        "env": [{"name": "SLEEP_LEN", "value": f"{sleep:g}"}],
    }
    manifest = {
        "apiVersion": keys.API_VERSION,
        "kind": keys.KIND,
        "metadata": {"name": "bench"},
        "spec": {
            "nodeSelectors": {"matchLabels": {LABEL: "yes"}},
            "interruptionBudget": {"count": budget},
            "packages": {"bench": package},
        },
    }
    time.sleep(2)  # let the operator list and index before the clock starts
    complete: set[str] = set()
    started = time.monotonic()
    apply_skyhook(kube, manifest)
    last_report = started
    for kind, node in watch(kube, "/api/v1/nodes", {"labelSelector": f"{LABEL}=yes"}, timeout):
        if kind in ("ADDED", "MODIFIED") and node_status(node, "bench") == "complete":
            complete.add(node["metadata"]["name"])
        now = time.monotonic()
        if now - last_report > 10:
            print(
                f"  {now - started:6.0f} s: {len(complete)}/{len(names)} nodes complete", flush=True
            )
            last_report = now
        if len(complete) == len(names):
            return now - started
        if not operator.running:
            raise SystemExit("operator exited:\n" + operator.log_tail())
    raise SystemExit(f"rollout not complete after {timeout:.0f} s ({len(complete)}/{len(names)})")


_PASS = re.compile(r"applied (\d+) in ([\d.]+) s \(planned in ([\d.]+) s\)")


def _pass_stats(log: str) -> str:
    """Passes that wrote something: how many, and their planning and writing times."""
    found = [_PASS.search(line) for line in log.splitlines()]
    rows = [(int(m[1]), float(m[2]), float(m[3])) for m in found if m]
    if not rows:
        return "passes             none logged"
    writes = sorted(r[1] for r in rows)
    plans = sorted(r[2] for r in rows)
    return (
        f"passes             {len(rows)} that wrote ({sum(r[0] for r in rows)} actions); "
        f"plan median {plans[len(plans) // 2] * 1000:.0f} ms, max {plans[-1] * 1000:.0f} ms; "
        f"write median {writes[len(writes) // 2] * 1000:.0f} ms, max {writes[-1] * 1000:.0f} ms"
    )


_METRIC = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>[\d.e+]+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def _apiserver_requests(kube: Kube) -> Counter[str]:
    """Requests the apiserver has served, as "VERB resource[/subresource]" (all clients)."""
    counts: Counter[str] = Counter()
    for line in kube.get_text("/metrics").splitlines():
        match = _METRIC.match(line)
        if match is None:
            continue
        labels = dict(_LABEL.findall(match["labels"]))
        resource = labels.get("resource") or "-"
        if labels.get("subresource"):
            resource += "/" + labels["subresource"]
        counts[f"{labels.get('verb', '?')} {resource}"] += int(float(match["value"]))
    return counts


def _operator_requests(log: str) -> Counter[str]:
    """The operator's own requests, from the line it logs when it stops."""
    counts: Counter[str] = Counter()
    for line in log.splitlines():
        if "API requests made:" in line:
            for item in line.split("API requests made:", 1)[1].split(","):
                what, _, n = item.strip().rpartition(" ")
                if n.isdigit():
                    counts[what] = int(n)
    return counts


def _pids(sandbox: Sandbox, operator: OperatorProcess) -> dict[str, int]:
    assert sandbox.control_plane is not None and sandbox.nodehost is not None
    assert operator.process is not None
    pids = {p.name: p.pid for p in sandbox.control_plane.processes}
    pids["node host"] = sandbox.nodehost.pid
    pids["operator"] = operator.process.pid
    return pids


class _CpuTimes(dict[str, float]):
    def __sub__(self, other: dict[str, float]) -> _CpuTimes:
        return _CpuTimes({k: v - other.get(k, 0.0) for k, v in self.items()})


def _cpu(pids: dict[str, int]) -> _CpuTimes:
    """CPU seconds of each process, its reaped children included (the node host's containers)."""
    times = _CpuTimes()
    for name, pid in pids.items():
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
        times[name] = ticks / os.sysconf("SC_CLK_TCK")
    return times


def _usage(operator: OperatorProcess) -> tuple[float, int]:
    """CPU seconds used so far and peak RSS (VmHWM) of the operator process."""
    assert operator.process is not None
    pid = operator.process.pid
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    hwm = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            hwm = int(line.split()[1]) * 1024
    return ticks / os.sysconf("SC_CLK_TCK"), hwm


if __name__ == "__main__":
    raise SystemExit(main())
