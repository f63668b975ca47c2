"""Invariants of the tuning scripts' parsers, run with bash against generated configMap text.

These functions only transform text, so they run on this machine's bash directly (no chroot):
tuning_lib.sh is sourced with SKYHOOK_DIR pointing at a scratch directory.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

LIB = Path(__file__).resolve().parents[1] / "skyhook_dir" / "tuning_lib.sh"


def bash(scratch: Path, call: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", f'source "{LIB}"; {call}', "tuning-test", *args],
        env={
            "PATH": "/usr/bin:/bin",
            "SKYHOOK_DIR": str(scratch),
            "SKYHOOK_RESOURCE_ID": "x_tuning_1.1.4",
        },
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tuning-parse")


keys = st.lists(st.from_regex(r"[a-z][a-z0-9_-]{0,8}", fullmatch=True), min_size=1, max_size=4).map(
    ".".join
)
words = st.lists(st.from_regex(r"[A-Za-z0-9/_:-]{1,8}", fullmatch=True), min_size=1, max_size=3)
spaces = st.sampled_from(["", " ", "  ", "\t"])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(keys, words, spaces, spaces, spaces), min_size=1, max_size=6), st.data())
def test_sysctl_lines_parse_to_key_and_normalised_value(scratch, entries, data):
    lines, expected = [], []
    for key, value_words, before, around, after in entries:
        if data.draw(st.booleans()):
            lines.append(data.draw(st.sampled_from(["", "# a comment", "; another", "   "])))
        gap = data.draw(st.sampled_from([" ", "  ", "\t"]))  # between words of one value
        lines.append(f"{before}{key}{around}={around}{gap.join(value_words)}{after}")
        expected.append(f"{key}\t{' '.join(value_words)}")
    conf = scratch / "sysctl.conf"
    conf.write_text("\n".join(lines) + "\n")
    result = bash(scratch, 'sysctl_pairs "$1"', str(conf))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == expected


SUFFIX_POWER = {"": 0, "K": 10, "M": 20, "G": 30, "T": 40, "P": 50, "E": 60}


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**40), st.sampled_from(sorted(SUFFIX_POWER)), st.integers(0, 3))
def test_systemd_limit_sizes_convert_to_proc_bytes(scratch, number, suffix, zeros):
    result = bash(scratch, 'proc_limit_value "$1"', "0" * zeros + f"{number}{suffix}")
    value = number << SUFFIX_POWER[suffix]
    if value < 2**63:
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == str(value)
    else:
        assert result.returncode != 0  # too large for a 64-bit limit: reported, not wrapped


def test_infinity_is_unlimited_and_other_words_are_rejected(scratch):
    assert bash(scratch, 'proc_limit_value "$1"', "infinity").stdout.strip() == "unlimited"
    for bad in ("-1", "1.5G", "10k", "lots", ""):
        assert bash(scratch, 'proc_limit_value "$1"', bad).returncode != 0, bad
