"""Agent overhead per stage: agent wall time minus the steps' own time, median of N runs.

For each stage the agent runs as a stage pod runs it (``python -m skyhook_agent.controller
<mode> <root> <copy_dir>``) against a minimal host root (real bash, chroot). The same steps are
then run bare (the same chroot, cwd and argv, no agent) to measure the steps' own time. The
overhead of one run is the difference; the figure is the median over N runs. It includes the
interpreter start-up and imports, which a stage pod pays too. Target: under 150 ms per stage.
Needs root (chroot). Usage: ``python benchmarks/agent_overhead.py [--runs 20]``.
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from skyhook_agent.interrupts import encode_interrupt
from skyhook_agent.testing import build_host_root

TARGET_MS = 150.0
COPY_DIR = "/var/lib/skyhook/bench/pkg-1.0.0-uid-1"
STEP = '#!/bin/bash\necho "$0 $*" > /dev/null\n'
# Three steps per action stage and matching checks; idempotence true so every run executes
# them (a skipped step would flatter the figure).
STAGES = {
    "apply": ["install.sh", "configure.sh", "enable.sh"],
    "apply-check": ["install_check.sh", "configure_check.sh", "enable_check.sh"],
    "config": ["write_config.sh", "reload.sh"],
    "config-check": ["write_config_check.sh", "reload_check.sh"],
    "post-interrupt": ["settle.sh"],
    "post-interrupt-check": ["settle_check.sh"],
}
AGENT_ENV = {
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    "COPY_RESOLV": "false",
    "SKYHOOK_ROOT_DIR": "/var/lib/skyhook/bench",
    "SKYHOOK_LOG_DIR": "/var/log/skyhook/bench",
}


def write_package(root: Path) -> None:
    package = root / COPY_DIR.lstrip("/")
    (package / "skyhook_dir").mkdir(parents=True)
    modes = {}
    for mode, scripts in STAGES.items():
        modes[mode] = []
        for script in scripts:
            (package / "skyhook_dir" / script).write_text(STEP)
            (package / "skyhook_dir" / script).chmod(0o755)
            modes[mode].append({"name": script, "path": script, "arguments": [mode],
                                "returncodes": [0], "on_host": True, "idempotence": True,
                                "upgrade_step": False})  # fmt: skip
    document = {"schema_version": "v1", "package_name": "bench", "package_version": "1.0.0",
                "expected_config_files": [], "modes": modes}  # fmt: skip
    (package / "config.json").write_text(json.dumps(document))


def timed(argv: list[str], env: dict[str, str], **kwargs: object) -> tuple[float, float]:
    """Wall and CPU (user + system, the process and its children) seconds of one command.

    CPU time barely moves when other work competes for the machine; wall time does.
    """
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, **kwargs)  # type: ignore[call-overload]
    wall = time.perf_counter() - started
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
    return wall, cpu


def bare_steps(root: Path, mode: str) -> tuple[float, float]:
    """The steps alone: same chroot, cwd and argv the agent uses, one after the other."""

    def enter() -> None:
        os.chroot(root)
        os.chdir(COPY_DIR)

    wall = cpu = 0.0
    for script in STAGES[mode]:
        argv = [f"{COPY_DIR}/skyhook_dir/{script}", mode]
        step_wall, step_cpu = timed(argv, AGENT_ENV, preexec_fn=enter)
        wall, cpu = wall + step_wall, cpu + step_cpu
    return wall, cpu


def measure(
    root: Path, mode: str, runs: int, extra: list[str], env: dict[str, str]
) -> dict[str, float]:
    argv = [sys.executable, "-m", "skyhook_agent.controller", mode, str(root), COPY_DIR, *extra]
    samples: dict[str, list[float]] = {"agent": [], "steps": [], "overhead": [], "cpu": []}
    for _ in range(runs):
        wall, cpu = timed(argv, env)
        own_wall, own_cpu = bare_steps(root, mode) if mode in STAGES else (0.0, 0.0)
        samples["agent"].append(wall)
        samples["steps"].append(own_wall)
        samples["overhead"].append(wall - own_wall)
        samples["cpu"].append(cpu - own_cpu)
    return {name: statistics.median(values) * 1000 for name, values in samples.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("agent_overhead needs root (the agent chroots into a host root)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="skyhook-bench-") as tmp:
        root = build_host_root(Path(tmp) / "root")
        write_package(root)

        def median_ms(argv: list[str]) -> float:
            return statistics.median(timed(argv, AGENT_ENV)[0] for _ in range(args.runs)) * 1000

        python_start = median_ms([sys.executable, "-c", "pass"])
        imports = median_ms([sys.executable, "-c", "import skyhook_agent.controller"])
        schemas = median_ms([sys.executable, "-c", "import skyhook_schemas.package_config"])
        print(
            f"agent overhead per stage, median of {args.runs} runs; part of every figure: "
            f"python start-up {python_start:.1f} ms, python + agent imports {imports:.1f} ms "
            f"(python + skyhook_schemas.package_config with jsonschema alone: {schemas:.1f} ms)"
        )
        print(
            f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs "
            "(wall figures grow with load; CPU figures barely do)"
        )
        header = f"{'stage':<22}{'steps':>6}{'agent ms':>10}{'steps ms':>10}{'overhead ms':>13}"
        print(f"{header}{'overhead CPU ms':>17}")
        worst = worst_cpu = 0.0
        cases = [(mode, [], AGENT_ENV) for mode in STAGES]
        interrupt_env = {**AGENT_ENV, "SKYHOOK_RESOURCE_ID": "bench-uid-1_bench_1.0.0"}
        # Interrupt commands are skipped after the first run (their flags exist); this row is
        # the agent's cost of deciding that, i.e. what every repeated interrupt pod pays.
        cases.append(("interrupt", [encode_interrupt("service_restart", services=["x"])],
                      interrupt_env))  # fmt: skip
        for mode, extra, env in cases:
            figures = measure(root, mode, args.runs, extra, env)
            worst = max(worst, figures["overhead"])
            worst_cpu = max(worst_cpu, figures["cpu"])
            count = len(STAGES.get(mode, ()))
            print(f"{mode:<22}{count:>6}{figures['agent']:>10.1f}{figures['steps']:>10.1f}"
                  f"{figures['overhead']:>13.1f}{figures['cpu']:>17.1f}")  # fmt: skip
        for label, value in (("wall", worst), ("CPU", worst_cpu)):
            verdict = "within" if value < TARGET_MS else "OVER"
            print(f"worst stage overhead ({label}) {value:.1f} ms: {verdict} the "
                  f"{TARGET_MS:.0f} ms target")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
