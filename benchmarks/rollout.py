"""Rollout time of the operator on a sandbox cluster, against the lower bound the budget allows.

N simulated nodes, P packages of the stage chain apply -> config (package k dependsOn package
k-1, so a node runs P x 2 stage pods one after another), an interruption budget B (a percent
of N or a count). Nothing else can make a node faster, so no schedule beats
lower bound = ceil(N / B) x P x 2 x T, where T is one stage pod's run time:

- default: real agentless containers, each of the stage's two agent containers sleeping
  SLEEP_LEN (T = 2 x SLEEP_LEN, plus what a container costs to start);
- `--fake T`: the node host is a fake kubelet, a stage pod's containers finish T seconds after
  the pod starts without any process, so 1,000 and 5,000 nodes fit on 2 cores and the time is
  the operator's, not the node host's.

For each combination of `--nodes`, `--packages` and `--budgets` (each a comma list) a fresh
sandbox runs one rollout and we print: time (SCR applied -> every node complete), lower bound,
ratio (target <= 1.15 at N = 1000), median and p99 hand-off delay (a stage pod seen done ->
the node's next stage pod seen created, target p99 < 500 ms), the operator's peak RSS and CPU
seconds, its API requests per node-stage by verb and resource (its own counters, logged when
it stops; target <= 5), the apiserver's total for comparison, and where the machine's CPU went.
The same figures go to a JSON file (`--json`, default benchmarks/results/<commit>.json) so
runs can be compared across commits. SKYHOOK_PROFILE=<file> makes the operator write a
cProfile of the run there, SKYHOOK_MEMORY_PROFILE=<file> the allocations alive at its peak,
SKYHOOK_MEMORY_CENSUS=<file> the objects alive by type, each asked for (SIGUSR1) once the
rollout is done.

`--no-leases` starts the nodes without Lease renewals (Sandbox's lease_renewals): what is left
is the operator's own cost, which a real fleet's heartbeats on the same two cores would hide.

    python benchmarks/rollout.py --fake 2 --nodes 100,1000 --packages 1,3 --budgets 10%,50
    python benchmarks/rollout.py --fake 2 --no-leases --nodes 1000
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import re
import signal
import statistics
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from skyhook_dev.harness import (
    OperatorProcess,
    apply_skyhook,
    ensure_namespace,
    install_crd,
    node_status,
    watch,
)
from skyhook_operator.kube.client import ApiError, Json, Kube, connect
from skyhook_sandbox.sandbox import Sandbox
from skyhook_schemas import keys

HERE = Path(__file__).resolve().parent
LABEL = "skyhook.nvidia.com/bench"
STAGES = ("apply", "config")
PROFILES = ("SKYHOOK_PROFILE", "SKYHOOK_MEMORY_PROFILE", "SKYHOOK_MEMORY_CENSUS")
# Writing the memory profile of 5,000 nodes' worth of objects takes minutes.
PROFILE_WRITE_TIMEOUT = 1800.0
AGENT_CONTAINERS_PER_STAGE = 2  # <stage> and <stage>-check; the copy container takes no SLEEP_LEN


@dataclass
class Figures:
    nodes: int
    packages: int
    budget: str
    budget_nodes: int
    stage_seconds: float
    fake_kubelet: bool
    lease_renewals: bool = True
    seconds: float = 0.0
    lower_bound: float = 0.0
    ratio: float = 0.0
    handoff_median_ms: float = 0.0
    handoff_p99_ms: float = 0.0
    handoffs: int = 0
    operator_peak_rss_mib: float = 0.0
    operator_cpu_seconds: float = 0.0
    operator_threads_idle: int = 0  # once ready, before the SCR is applied
    operator_threads_end: int = 0  # as the rollout completes
    operator_requests_per_node_stage: float = 0.0
    operator_requests: dict[str, float] = field(default_factory=dict)
    apiserver_requests_per_node_stage: float = 0.0
    apiserver_requests: dict[str, float] = field(default_factory=dict)
    apiserver_refused: dict[str, int] = field(default_factory=dict)  # "VERB resource CODE"
    cpu_seconds: dict[str, float] = field(default_factory=dict)
    events: str = ""
    passes: str = ""
    # How far `kubectl get skyhooks` lagged: per node completion, the seconds until the
    # status's count of complete nodes included it; and how many times that count changed.
    status_lag_median_s: float = 0.0
    status_lag_max_s: float = 0.0
    status_changes: int = 0
    # Passes that looked at most QUIET_LOOKED_AT nodes again (the quiet-pass target's "pass
    # with 10 changed nodes"): how many, and the median of their planning, CPU and wall time.
    quiet_passes: int = 0
    quiet_plan_cpu_median_ms: float = 0.0
    quiet_plan_median_ms: float = 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", default="1000", help="comma list of node counts (1000)")
    parser.add_argument("--packages", default="1", help="comma list of package counts (1)")
    parser.add_argument(
        "--budgets", default="10%", help="comma list: N%% of the nodes or a count (10%%)"
    )
    parser.add_argument("--budget", type=int, default=0, help="one count (older spelling)")
    parser.add_argument(
        "--fake", type=float, default=None, metavar="T", help="fake kubelet: stage pods take T s"
    )
    parser.add_argument(
        "--no-leases",
        action="store_true",
        help="nodes never renew their Lease: the operator's own cost without the fleet's heartbeats",
    )
    parser.add_argument("--sleep", type=float, default=5.0, help="SLEEP_LEN without --fake, s")
    parser.add_argument("--timeout", type=float, default=3600.0, help="give up after this many s")
    parser.add_argument("--json", type=Path, default=None, help="where to write the figures")
    args = parser.parse_args()
    budgets = [str(args.budget)] if args.budget else args.budgets.split(",")
    results = []
    for nodes in (int(n) for n in args.nodes.split(",")):
        for packages in (int(p) for p in args.packages.split(",")):
            for budget in budgets:
                figures = _run(nodes, packages, budget.strip(), args)
                _print(figures)
                results.append(figures)
    target = args.json or HERE / "results" / f"{_commit()}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps([asdict(f) for f in results], indent=1) + "\n")
    print(f"\nfigures written to {target}")
    return 0


def _commit() -> str:
    result = subprocess.run(
        ["git", "rev-parse", "--short=12", "HEAD"], cwd=HERE, capture_output=True, text=True
    )
    return result.stdout.strip() or "unknown"


def _budget_nodes(nodes: int, budget: str) -> tuple[dict[str, int], int]:
    if budget.endswith("%"):
        percent = int(budget[:-1])
        return {"percent": percent}, max(1, int(nodes * (percent / 100.0)))
    count = int(budget)
    return {"count": count}, max(1, min(nodes, count))


def _run(nodes: int, packages: int, budget: str, args: argparse.Namespace) -> Figures:
    spec_budget, per_wave = _budget_nodes(nodes, budget)
    stage_seconds = args.fake if args.fake is not None else AGENT_CONTAINERS_PER_STAGE * args.sleep
    figures = Figures(
        nodes,
        packages,
        budget,
        per_wave,
        stage_seconds,
        args.fake is not None,
        lease_renewals=not args.no_leases,
        lower_bound=math.ceil(nodes / per_wave) * packages * len(STAGES) * stage_seconds,
    )
    print(f"\n--- {nodes} nodes, {packages} package(s), budget {budget} ---", flush=True)
    with tempfile.TemporaryDirectory(prefix="skyhook-bench-", dir="/var/tmp") as workdir:
        sandbox = Sandbox(
            Path(workdir) / "sandbox",
            fake_pod_seconds=args.fake,
            lease_renewals=not args.no_leases,
        ).start()
        try:
            started = time.monotonic()
            names = sandbox.add_nodes(
                nodes, labels={LABEL: "yes"}, prefix="bench", timeout=max(120.0, nodes / 2)
            )
            print(f"{len(names)} nodes Ready in {time.monotonic() - started:.1f} s", flush=True)
            kube = connect(str(sandbox.kubeconfig))
            install_crd(kube)
            ensure_namespace(kube, "skyhook")
            env = _operator_env()
            operator = OperatorProcess(
                sandbox.kubeconfig, Path(workdir) / "operator.log", env=env
            ).start()
            operator.wait_ready()
            try:
                figures.operator_threads_idle = _threads(operator)
                pids = _pids(sandbox, operator)
                cpu_before, requests_before = _cpu(pids), _apiserver_requests(kube)
                pods = _PodRecorder(kube, args.timeout)
                status = _StatusRecorder(kube, args.timeout)
                completions = _rollout(
                    kube,
                    names,
                    manifest=_manifest(packages, spec_budget, args),
                    timeout=args.timeout,
                    operator=operator,
                )
                figures.seconds = completions[-1] - completions[0]
                figures.cpu_seconds = dict(_cpu(pids) - cpu_before)
                requests = _apiserver_requests(kube) - requests_before
                cpu, rss, figures.operator_threads_end = _usage(operator)
                _collect_profiles(operator, [Path(env[p]) for p in PROFILES if p in env])
            finally:
                operator.stop(grace=120)  # it logs its request counters as it exits
            figures.events = _events(kube)  # after the stop: what it had pending is posted
            kube.close()
            log = (Path(workdir) / "operator.log").read_text(errors="replace")
        finally:
            sandbox.stop()
    node_stages = nodes * packages * len(STAGES)
    figures.handoffs, figures.handoff_median_ms, figures.handoff_p99_ms = _spread(pods.handoffs())
    figures.ratio, figures.operator_cpu_seconds, figures.operator_peak_rss_mib = (
        figures.seconds / figures.lower_bound,
        cpu,
        rss / 2**20,
    )
    ours = _operator_requests(log)
    figures.operator_requests_per_node_stage = ours.total() / node_stages
    figures.operator_requests = _per_stage(ours, node_stages)
    figures.apiserver_requests_per_node_stage = requests.served.total() / node_stages
    figures.apiserver_requests, figures.apiserver_refused = (
        _per_stage(requests.served, node_stages),
        dict(requests.refused.most_common()),
    )
    passes = _passes(log)
    figures.passes = _pass_stats(passes)
    (figures.quiet_passes, figures.quiet_plan_cpu_median_ms, figures.quiet_plan_median_ms) = _quiet(
        passes
    )
    figures.status_lag_median_s, figures.status_lag_max_s, figures.status_changes = status.lags(
        completions[1:]
    )
    return figures


def _spread(delays: list[float]) -> tuple[int, float, float]:
    """How many hand-offs, and their median and p99 in ms."""
    delays = sorted(delays)
    if not delays:
        return 0, 0.0, 0.0
    p99 = delays[min(len(delays) - 1, int(len(delays) * 0.99))]
    return len(delays), statistics.median(delays) * 1000, p99 * 1000


def _print(f: Figures) -> None:
    print(f"nodes {f.nodes}, packages {f.packages}, budget {f.budget} ({f.budget_nodes} nodes), "
          f"stage pod {f.stage_seconds:g} s{' (fake kubelet)' if f.fake_kubelet else ''}, "
          f"node leases {'renewed' if f.lease_renewals else 'never renewed'}")  # fmt: skip
    print(f"rollout time       {f.seconds:8.1f} s")
    print(f"lower bound        {f.lower_bound:8.1f} s")
    print(f"ratio              {f.ratio:8.3f}  (target <= 1.15 at 1,000 nodes)")
    print(f"hand-off delay     median {f.handoff_median_ms:.0f} ms, p99 {f.handoff_p99_ms:.0f} ms "
          f"over {f.handoffs} (target p99 < 500 ms)")  # fmt: skip
    print(f"operator           {f.operator_cpu_seconds:.1f} CPU-s, "
          f"peak RSS {f.operator_peak_rss_mib:.0f} MiB (target < 100 MiB), "
          f"threads {f.operator_threads_idle} idle, {f.operator_threads_end} at the end")  # fmt: skip
    print(f.passes)
    print(f"quiet passes       {f.quiet_passes} looked at <= {QUIET_LOOKED_AT} nodes again: "
          f"plan median {f.quiet_plan_median_ms:.1f} ms, {f.quiet_plan_cpu_median_ms:.1f} ms CPU "
          f"(target <= 20 ms at 5,000 nodes)")  # fmt: skip
    print(f"Skyhook status     a node complete shows in its count after median "
          f"{f.status_lag_median_s:.1f} s, max {f.status_lag_max_s:.1f} s; "
          f"the count changed {f.status_changes} times")  # fmt: skip
    print(
        "CPU s during the rollout: " + ", ".join(f"{k} {v:.0f}" for k, v in f.cpu_seconds.items())
    )
    print(
        f"operator requests per node-stage: {f.operator_requests_per_node_stage:.2f} (target <= 5)"
    )
    print("  " + ", ".join(f"{k} {v:.2f}" for k, v in f.operator_requests.items()))
    print(
        f"apiserver requests per node-stage (all clients): {f.apiserver_requests_per_node_stage:.1f}"
    )
    print("  " + ", ".join(f"{k} {v:.2f}" for k, v in list(f.apiserver_requests.items())[:12]))
    refused = ", ".join(f"{k}: {n}" for k, n in f.apiserver_refused.items())
    print(f"apiserver errors (all clients, VERB resource CODE: count): {refused or 'none'}")
    print(f.events)


def _manifest(packages: int, budget: Mapping[str, int], args: argparse.Namespace) -> Json:
    chain: dict[str, Any] = {}
    for index in range(packages):
        package: dict[str, Any] = {
            "version": "1.0.0",
            "image": "ghcr.io/nvidia/skyhook-packages/shellscript",
            "agentImageOverride": "ghcr.io/nvidia/skyhook/agentless:bench",
            "env": [{"name": "SLEEP_LEN", "value": f"{args.sleep:g}"}],
        }
        if index:
            package["dependsOn"] = {_package_name(index - 1): "1.0.0"}
        chain[_package_name(index)] = package
    return {
        "apiVersion": keys.API_VERSION,
        "kind": keys.KIND,
        "metadata": {"name": "bench"},
        "spec": {
            "nodeSelectors": {"matchLabels": {LABEL: "yes"}},
            "interruptionBudget": dict(budget),
            "packages": chain,
        },
    }


def _package_name(index: int) -> str:
    return "bench-" + chr(ord("a") + index)


def _follow(
    kube: Kube,
    path: str,
    query: dict[str, str],
    timeout: float,
    *,
    record: Callable[[Json], None],
    what: str,
) -> None:
    """Watch `path` in a background thread, calling `record` with each object as it changes;
    return once the watch has listed what exists (SystemExit naming `what` after 60 s)."""
    synced = threading.Event()

    def pump() -> None:
        try:
            for kind, obj in watch(kube, path, query, timeout):
                if kind == "SYNCED":
                    synced.set()
                else:
                    record(obj)
        except (ApiError, OSError):
            return  # the sandbox stopped under the watch: the run is over

    threading.Thread(target=pump, daemon=True).start()
    if not synced.wait(60):
        raise SystemExit(f"the {what} watch did not start")


class _PodRecorder:
    """Watches the rollout's stage pods; per node, when each pod was first seen done (every
    init container exited 0) and when each was first seen at all."""

    def __init__(self, kube: Kube, timeout: float) -> None:
        self.created: dict[str, list[tuple[float, str]]] = {}
        self.done: dict[str, float] = {}
        self._seen: set[str] = set()
        self._lock = threading.Lock()
        query = {"labelSelector": f"{keys.NAME_LABEL}=bench"}
        _follow(kube, "/api/v1/pods", query, timeout, record=self._record, what="pod")

    def _record(self, pod: Json) -> None:
        at = time.monotonic()
        uid, node = pod["metadata"]["uid"], pod["spec"].get("nodeName", "")
        with self._lock:
            if uid not in self._seen:
                self._seen.add(uid)
                self.created.setdefault(node, []).append((at, uid))
            if uid not in self.done and _inits_done(pod):
                self.done[uid] = at

    def handoffs(self) -> list[float]:
        """Seconds from each stage pod seen done to the same node's next pod seen created."""
        delays = []
        with self._lock:
            for pods in self.created.values():
                for (_, uid), (next_at, _) in itertools.pairwise(pods):
                    if uid in self.done:
                        delays.append(max(0.0, next_at - self.done[uid]))
        return delays


class _StatusRecorder:
    """Watches the benchmark's Skyhook; when its status's node count (`completeNodes`, the
    COMPLETE column of `kubectl get skyhooks`) changed."""

    def __init__(self, kube: Kube, timeout: float) -> None:
        self.changes: list[tuple[float, int]] = []  # (time.monotonic(), complete nodes)
        self._shown = ""
        self._lock = threading.Lock()
        query = {"fieldSelector": "metadata.name=bench"}
        _follow(kube, kube.skyhook_path(), query, timeout, record=self._record, what="Skyhook")

    def _record(self, scr: Json) -> None:
        shown = str((scr.get("status") or {}).get("completeNodes") or "")
        with self._lock:
            if shown and shown != self._shown:
                self._shown = shown
                self.changes.append((time.monotonic(), int(shown.partition("/")[0])))

    def lags(self, completions: list[float]) -> tuple[float, float, int]:
        """For the k-th node seen complete (at `completions[k - 1]`), the seconds until the
        status first counted k complete nodes (until now, if it never did): their median and
        maximum; and how many times the count changed."""
        with self._lock:
            changes = list(self.changes)
        now = time.monotonic()
        lags = []
        for k, at in enumerate(completions, 1):
            shown = next((t for t, count in changes if count >= k), now)
            lags.append(max(0.0, shown - at))
        return statistics.median(lags), max(lags), len(changes)


def _inits_done(pod: Json) -> bool:
    statuses = (pod.get("status") or {}).get("initContainerStatuses") or []
    wanted = len(pod["spec"].get("initContainers") or [])
    finished = [
        s for s in statuses if ((s.get("state") or {}).get("terminated") or {}).get("exitCode") == 0
    ]
    return wanted > 0 and len(finished) == wanted


def _events(kube: Kube) -> str:
    """The operator's Events: objects stored, and the occurrences their counts add up to."""
    items = kube.request("GET", "/api/v1/namespaces/default/events")["items"]
    ours = [e for e in items if (e.get("source") or {}).get("component") == "skyhook-controller"]
    occurrences = sum(int(e.get("count") or 1) for e in ours)
    return f"Events: {len(ours)} objects for {occurrences} occurrences"


def _per_stage(counts: Counter[str], stages: int) -> dict[str, float]:
    return {what: round(n / stages, 3) for what, n in counts.most_common()}


def _operator_env() -> dict[str, str]:
    """The operator's environment: info logs (its pass log), and the profiles asked for here,
    each file removed first so that `_collect_profiles` waits for this run's."""
    env = {"SKYHOOK_LOG_LEVEL": "info"}
    for profile in PROFILES:
        if os.environ.get(profile):
            env[profile] = os.environ[profile]
            Path(env[profile]).unlink(missing_ok=True)
    return env


def _collect_profiles(operator: OperatorProcess, paths: list[Path]) -> None:
    """Ask the operator for the profiles it keeps (SIGUSR1, cli.py `profiled`) once the rollout
    is done, and wait until each is written whole."""
    if not paths or operator.process is None:
        return
    os.kill(operator.process.pid, signal.SIGUSR1)
    deadline = time.monotonic() + PROFILE_WRITE_TIMEOUT
    while not all(path.exists() for path in paths):
        if time.monotonic() > deadline or not operator.running:
            missing = ", ".join(str(p) for p in paths if not p.exists())
            print(f"profiles not written: {missing}", flush=True)
            return
        time.sleep(1.0)
    print(f"profiles written: {', '.join(map(str, paths))}", flush=True)


def _rollout(
    kube: Kube, names: list[str], *, manifest: Json, timeout: float, operator: OperatorProcess
) -> list[float]:
    """When the SCR was applied, then when each node was seen complete (time.monotonic())."""
    time.sleep(2)  # let the operator list and index before the clock starts
    complete: set[str] = set()
    started = time.monotonic()
    completions = [started]
    apply_skyhook(kube, manifest)
    last_report = started
    for kind, node in watch(kube, "/api/v1/nodes", {"labelSelector": f"{LABEL}=yes"}, timeout):
        now = time.monotonic()
        if kind in ("ADDED", "MODIFIED") and node_status(node, "bench") == "complete":
            if node["metadata"]["name"] not in complete:
                completions.append(now)
            complete.add(node["metadata"]["name"])
        if now - last_report > 10:
            print(
                f"  {now - started:6.0f} s: {len(complete)}/{len(names)} nodes complete", flush=True
            )
            last_report = now
            _check_spec(kube)
        if len(complete) == len(names):
            return completions
        if not operator.running:
            raise SystemExit("operator exited:\n" + operator.log_tail())
    raise SystemExit(f"rollout not complete after {timeout:.0f} s ({len(complete)}/{len(names)})")


def _check_spec(kube: Kube) -> None:
    """A benchmark SCR the operator refuses would only time out: stop at once instead."""
    conditions = (kube.request("GET", kube.skyhook_path("bench")).get("status") or {}).get(
        "conditions"
    ) or []
    for condition in conditions:
        if condition.get("type", "").endswith("SpecInvalid") and condition["status"] == "True":
            raise SystemExit(f"the operator refused the SCR: {condition.get('message')}")


_PASS = re.compile(
    r"applied (\d+) in ([\d.]+) s, queued (\d+) \(planned in ([\d.]+) s; "
    r"([\d.]+) ms CPU, (\d+) nodes looked at again\)"
)
QUIET_LOOKED_AT = 10


@dataclass(frozen=True)
class _Pass:
    actions: int
    wait_s: float  # on writes: only a Skyhook-wide plan waits (node writes are queued)
    plan_s: float
    plan_cpu_ms: float
    looked_at: int


def _passes(log: str) -> list[_Pass]:
    """The passes that wrote something, from the operator's pass log."""
    found = [_PASS.search(line) for line in log.splitlines()]
    return [
        _Pass(int(m[1]) + int(m[3]), float(m[2]), float(m[4]), float(m[5]), int(m[6]))
        for m in found
        if m
    ]


def _quiet(passes: list[_Pass]) -> tuple[int, float, float]:
    """How many passes looked at QUIET_LOOKED_AT nodes again or fewer, and their median
    planning CPU and wall time in ms."""
    quiet = [p for p in passes if p.looked_at <= QUIET_LOOKED_AT]
    if not quiet:
        return 0, 0.0, 0.0
    cpu = statistics.median(p.plan_cpu_ms for p in quiet)
    return len(quiet), cpu, statistics.median(p.plan_s for p in quiet) * 1000


def _pass_stats(passes: list[_Pass]) -> str:
    """Passes that wrote something: how many, their planning times, and how long the pass
    itself waited on writes."""
    if not passes:
        return "passes             none logged"
    waits = sorted(p.wait_s for p in passes)
    plans = sorted(p.plan_s for p in passes)
    p95 = plans[min(len(plans) - 1, len(plans) * 95 // 100)]
    looked_at = statistics.median(p.looked_at for p in passes)
    cpu = statistics.median(p.plan_cpu_ms for p in passes)
    return (
        f"passes             {len(passes)} that wrote ({sum(p.actions for p in passes)} "
        f"actions); plan median {plans[len(plans) // 2] * 1000:.0f} ms ({cpu:.0f} ms CPU, "
        f"{looked_at:.0f} nodes looked at again), p95 {p95 * 1000:.0f} ms, "
        f"max {plans[-1] * 1000:.0f} ms; "
        f"waited on writes median {waits[len(waits) // 2] * 1000:.0f} ms, "
        f"max {waits[-1] * 1000:.0f} ms"
    )


@dataclass
class _ApiserverRequests:
    served: Counter[str]  # "VERB resource[/subresource]", all clients
    refused: Counter[str]  # those answered with an error, "VERB resource[/subresource] CODE"

    def __sub__(self, other: _ApiserverRequests) -> _ApiserverRequests:
        return _ApiserverRequests(self.served - other.served, self.refused - other.refused)


def _apiserver_requests(kube: Kube) -> _ApiserverRequests:
    """Requests the apiserver has served so far, from its metrics."""
    found = _ApiserverRequests(Counter(), Counter())
    for family in text_string_to_metric_families(kube.get_text("/metrics")):
        if family.name != "apiserver_request":
            continue
        for sample in family.samples:
            if sample.name != "apiserver_request_total":
                continue
            labels = sample.labels
            resource = labels.get("resource") or "-"
            if labels.get("subresource"):
                resource += "/" + labels["subresource"]
            what, n = f"{labels.get('verb', '?')} {resource}", int(sample.value)
            found.served[what] += n
            code = labels.get("code", "")
            if code[:1] in {"4", "5"}:
                found.refused[f"{what} {code}"] += n
    return found


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


def _threads(operator: OperatorProcess) -> int:
    """The operator process's threads, the main one included."""
    assert operator.process is not None
    return len(os.listdir(f"/proc/{operator.process.pid}/task"))


def _usage(operator: OperatorProcess) -> tuple[float, int, int]:
    """CPU seconds used so far, peak RSS (VmHWM) and threads of the operator process."""
    assert operator.process is not None
    pid = operator.process.pid
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    hwm = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            hwm = int(line.split()[1]) * 1024
    return ticks / os.sysconf("SC_CLK_TCK"), hwm, _threads(operator)


if __name__ == "__main__":
    raise SystemExit(main())
