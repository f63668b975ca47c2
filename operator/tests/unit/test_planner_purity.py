"""The planner decides; it never talks to the cluster (style-by-example.md's layer rule)."""

from __future__ import annotations

import subprocess
import sys

PURE = [
    "skyhook_operator.planner.plan",
    "skyhook_operator.planner.simulate",
    "skyhook_operator.spec",
    "skyhook_operator.nodestate",
    "skyhook_operator.podbuilder",
    "skyhook_operator.status",
]


def test_pure_modules_import_no_kube_client_or_kopf() -> None:
    probe = (
        "import sys\n"
        f"for name in {PURE!r}: __import__(name)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in {'kopf', 'kubernetes', "
        "'kubernetes_asyncio', 'urllib3', 'aiohttp'} or m.startswith('skyhook_operator.kube'))\n"
        "print(','.join(bad))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""
