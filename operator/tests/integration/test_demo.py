"""The README's demo command, run as a user would (output to a pipe, not a terminal)."""

from __future__ import annotations

import subprocess
import sys


def test_demo_rolls_out_the_demo_scr_and_shows_progress_and_results() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "skyhook_dev", "demo"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    # Live progress: a line per node whenever its stage or state changes.
    for node in ("demo-1", "demo-2", "demo-3"):
        assert f"{node}: in_progress  tuning 1.1.0 apply/in_progress" in output
        assert f"{node}: complete  tuning 1.1.0 config/complete" in output
    assert "rollout complete on 3 nodes" in output
    # Final node states, and what the demo SCR's scripts wrote on each node.
    assert output.count('"state": "complete"') == 3
    assert output.count("hello world") == 3
    assert output.count("a config is run") == 3
