"""Pinned Prometheus and promtool, built from the Go module proxy once and cached (ci/_gotool.py).

    python ci/_prometheus.py     build whichever are missing (with progress), print their paths

The monitoring tests check the alert rules with promtool (`check rules`, `test rules`) and run a
real Prometheus that scrapes the operator, to query every dashboard panel. Prometheus 3.x is
published as module v0.3xx.y (3.16.0 is v0.316.0). Built as the release is (the netgo tag, the
version link flags) but without the `builtinassets` tag: the web UI's assets are not in the
module, and the tests need only the HTTP API. $SKYHOOK_PROMETHEUS and $SKYHOOK_PROMTOOL name
binaries to use instead. The first build is long (measured on 2 cores shared with other builds:
promtool 39 minutes, its 1,100 packages include every service discovery; then prometheus 2
minutes more).
"""

from __future__ import annotations

import sys
from pathlib import Path

from _gotool import GoTool, Say, ensure_all, print_paths

PROMETHEUS_MODULE = "github.com/prometheus/prometheus"
PROMETHEUS_MODULE_VERSION = "v0.316.0"
PROMETHEUS_VERSION = "3.16.0"  # what the binaries report; the module's VERSION file
VERSION_FLAG = f"-X github.com/prometheus/common/version.Version={PROMETHEUS_VERSION}"


def _tool(name: str) -> GoTool:
    return GoTool(
        name=name,
        module=PROMETHEUS_MODULE,
        package=f"{PROMETHEUS_MODULE}/cmd/{name}",
        version=PROMETHEUS_MODULE_VERSION,
        version_args=("--version",),  # prometheus, version 3.16.0 (branch: ...)
        link_flags=lambda _: VERSION_FLAG,
        version_word=2,
        reported_version=PROMETHEUS_VERSION,
        tags=("netgo",),
    )


PROMTOOL = _tool("promtool")
PROMETHEUS = _tool("prometheus")
TOOLS = (PROMTOOL, PROMETHEUS)


def ensure_prometheus_tools(say: Say = print) -> dict[str, Path]:
    """promtool's and prometheus' cached paths by name, each built first when missing."""
    return ensure_all(TOOLS, say)


def main() -> int:
    return print_paths(TOOLS, "ci/_prometheus.py")


if __name__ == "__main__":
    sys.exit(main())
