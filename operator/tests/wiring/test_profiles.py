"""What the operator loads and what its profiles say: the memory a fleet never needs stays
out of the process, and the benchmark's memory profile names where the memory went."""

from __future__ import annotations

import os
import pstats
import signal
import subprocess
import sys
import time
from pathlib import Path

from skyhook_operator.cli import profiled, write_census


def test_the_operator_starts_without_the_oci_registry_client() -> None:
    """ORAS (and what it loads) comes in with the first OCI artifact fetch, not at start."""
    code = "import sys, skyhook_operator.cli; print(sorted(m for m in sys.modules if 'oras' in m))"
    loaded = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    assert loaded.strip() == "[]"


def test_the_memory_profile_names_what_was_held_at_the_peak(tmp_path: Path) -> None:
    """Written at exit, the profile shows what the peak held, though it is gone by then."""
    path = tmp_path / "memory.txt"
    with profiled(None, str(path)):
        held = [bytearray(64 << 10) for _ in range(64)]  # 4 MiB, over the snapshot step
        time.sleep(2.5)  # the sampler looks once a second
        del held
    text = path.read_text()
    top_line = text.split("by line:\n", 1)[1].splitlines()[0]
    assert f"{Path(__file__).name}:" in top_line and "size=4" in top_line, text[:2000]


def test_the_profiles_are_written_when_asked_while_the_operator_runs(tmp_path: Path) -> None:
    """SIGUSR1 writes both profiles at once, whole: a large fleet's memory profile takes
    longer to write than a stopping operator is given."""
    memory, cpu = tmp_path / "memory.txt", tmp_path / "cpu.prof"
    with profiled(str(cpu), str(memory)):
        held = [bytearray(64 << 10) for _ in range(64)]
        time.sleep(2.5)
        os.kill(os.getpid(), signal.SIGUSR1)
        assert memory.exists() and cpu.exists()
        written = memory.read_text()
        del held
    assert "by line:" in written
    assert pstats.Stats(str(cpu)).total_calls > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cpu.prof", "memory.txt"]


class _Held:
    """What the census below should find and count."""

    def __init__(self, payload: str) -> None:
        self.payload = payload


def test_the_census_counts_the_live_objects_by_type(tmp_path: Path) -> None:
    held = [_Held("x" * 1000 + str(i)) for i in range(5000)]
    path = tmp_path / "census.txt"
    write_census(str(path))
    lines = path.read_text().splitlines()
    rows = lines[1:]
    ours = next(row for row in rows if row.endswith(f"{__name__}._Held"))
    assert ours.split()[2] == "5000", ours
    strings = next(row for row in rows if row.endswith("builtins.str"))
    assert float(strings.split()[0]) >= 5000 * 1000 / 2**20, strings  # their payloads
    # The ids the census keeps of what it counted are not counted themselves.
    ints = next(row for row in rows if row.endswith("builtins.int"))
    assert int(ints.split()[2]) < int(lines[0].split()[0]) / 4, (ints, lines[0])
    del held
