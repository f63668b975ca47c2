"""Run the benchmarks and print their figures: ``tox -e bench [-- NAME [ARGS...]]``.

Each ``benchmarks/<name>.py`` is a standalone script that prints what it measured. With no
arguments every benchmark runs with its defaults; with ``NAME`` only that one runs, and the
remaining arguments are passed to it (e.g. ``tox -e bench -- rollout --nodes 200``).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def available() -> dict[str, Path]:
    return {path.stem: path for path in sorted(HERE.glob("*.py")) if path.name != "run.py"}


def main(argv: list[str]) -> int:
    benchmarks = available()
    if argv:
        name, *extra = argv
        if name not in benchmarks:
            print(
                f"unknown benchmark {name!r}; available: {', '.join(benchmarks)}", file=sys.stderr
            )
            return 2
        selected = {name: benchmarks[name]}
    else:
        selected, extra = benchmarks, []
    failed = []
    for name, path in selected.items():
        print(f"\n=== {name} ===", flush=True)
        start = time.monotonic()
        result = subprocess.run([sys.executable, str(path), *extra])
        print(f"=== {name}: exit {result.returncode} in {time.monotonic() - start:.1f} s ===")
        if result.returncode:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
