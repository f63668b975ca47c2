from __future__ import annotations

import json
from pathlib import Path

import pytest
import semver
from hypothesis import given
from hypothesis import strategies as st
from upstream_configs import shellscript, step_paths

from skyhook_schemas.tags import PackageTag, TagError, check_tag, parse_tag
from skyhook_schemas.versions import (
    VersionChange,
    VersionError,
    compare_versions,
    parse_spec_version,
    parse_version,
    version_change,
)

numbers = st.integers(min_value=0, max_value=10**6)
identifiers = st.from_regex(r"\A(0|[1-9][0-9]{0,3}|[a-z][a-z0-9-]{0,5})\Z")
prereleases = st.lists(identifiers, min_size=0, max_size=3).map(".".join)
builds = st.lists(st.from_regex(r"\A[0-9a-z]{1,4}\Z"), min_size=0, max_size=2).map(".".join)


@st.composite
def versions(draw: st.DrawFn) -> str:
    text = f"{draw(numbers)}.{draw(numbers)}.{draw(numbers)}"
    if pre := draw(prereleases):
        text += f"-{pre}"
    if build := draw(builds):
        text += f"+{build}"
    return text


@pytest.mark.parametrize(
    ("text", "hint"),
    [
        pytest.param("1.2", "give all three parts MAJOR.MINOR.PATCH (1.2.0)", id="shorthand"),
        pytest.param("v1.2.3", "drop the leading 'v' (1.2.3)", id="v-prefix"),
        pytest.param("01.2.3", "leading zeros", id="leading-zero"),
        pytest.param("latest", "expected MAJOR.MINOR.PATCH", id="word"),
        pytest.param("", "is not a version", id="empty"),
    ],
)
def test_non_strict_versions_are_rejected_with_a_hint(text: str, hint: str) -> None:
    with pytest.raises(VersionError, match=hint.replace("(", r"\(").replace(")", r"\)")):
        parse_version(text)


@pytest.mark.parametrize(
    ("old", "new", "change"),
    [
        ("1.2.3", "1.2.4", VersionChange.UPGRADE),
        ("1.2.4", "1.2.3", VersionChange.DOWNGRADE),
        ("1.0.0-rc.1", "1.0.0", VersionChange.UPGRADE),
        ("1.0.0+b1", "1.0.0+b2", VersionChange.SAME),
        ("2024.7.7-test", "2024.7.7", VersionChange.UPGRADE),
        ("1.10.0", "1.9.0", VersionChange.DOWNGRADE),
        pytest.param("1.2", "1.2.0", VersionChange.SAME, id="shorthand-equals-full"),
        pytest.param("v1.2.0", "1.2", VersionChange.SAME, id="v-prefix-equals-shorthand"),
        pytest.param("1", "1.0.1", VersionChange.UPGRADE, id="major-only"),
        pytest.param("v2", "1.9", VersionChange.DOWNGRADE, id="v-major-only"),
    ],
)
def test_version_change(old: str, new: str, change: VersionChange) -> None:
    assert version_change(old, new) is change


@given(versions(), versions())
def test_ordering_is_antisymmetric_and_matches_change(a: str, b: str) -> None:
    assert compare_versions(a, b) == -compare_versions(b, a)
    expected = {1: VersionChange.UPGRADE, -1: VersionChange.DOWNGRADE, 0: VersionChange.SAME}
    assert version_change(a, b) is expected[compare_versions(b, a)]


@given(versions(), versions(), versions())
def test_ordering_is_transitive(a: str, b: str, c: str) -> None:
    ordered = sorted([a, b, c], key=parse_version)
    assert compare_versions(ordered[0], ordered[1]) <= 0
    assert compare_versions(ordered[1], ordered[2]) <= 0
    assert compare_versions(ordered[0], ordered[2]) <= 0


@given(versions())
def test_build_metadata_never_changes_the_order(text: str) -> None:
    plain = str(semver.Version.parse(text).replace(build=None))
    assert version_change(plain, text) is VersionChange.SAME


@pytest.mark.parametrize(
    ("text", "normalized"),
    [
        pytest.param("1.2.3", "1.2.3", id="strict"),
        pytest.param("1.2", "1.2.0", id="major-minor"),
        pytest.param("1", "1.0.0", id="major"),
        pytest.param("0", "0.0.0", id="zero"),
        pytest.param("v1.2.3", "1.2.3", id="v-prefix"),
        pytest.param("v1.2", "1.2.0", id="v-major-minor"),
        pytest.param("v0", "0.0.0", id="v-major"),
        pytest.param("2.3.1-test", "2.3.1-test", id="prerelease"),
        pytest.param("2024.7.7-test", "2024.7.7-test", id="calendar-prerelease"),
        pytest.param("1.0.0+b1", "1.0.0+b1", id="build"),
        pytest.param("v1.0.0-rc.1+b.01", "1.0.0-rc.1+b.01", id="v-prerelease-build"),
    ],
)
def test_spec_versions_accept_every_upstream_spelling(text: str, normalized: str) -> None:
    version = parse_spec_version(text)
    assert (version.text, version.normalized) == (text, normalized)
    if text == normalized:
        assert version.warning is None
    else:
        assert version.warning == (
            f"version {text!r} is not strict SemVer; it is read as {normalized}"
        )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("1.2.3.4", "expected MAJOR.MINOR.PATCH", id="four-parts"),
        pytest.param("01.2.3", "leading zeros", id="leading-zero"),
        pytest.param("2024.01.01", "leading zeros", id="calendar-leading-zeros"),
        pytest.param("v01", "leading zeros", id="v-leading-zero"),
        pytest.param("1.2.3-01", "expected MAJOR.MINOR.PATCH", id="prerelease-leading-zero"),
        pytest.param("latest", "expected MAJOR.MINOR.PATCH", id="word"),
        pytest.param("1.2-rc.1", r"needs all three parts MAJOR\.MINOR\.PATCH \(1\.2\.0-rc\.1\)",
                     id="shorthand-prerelease"),
        pytest.param("v1+b1", r"\(1\.0\.0\+b1\)", id="shorthand-build"),
        pytest.param("1.2-", "expected MAJOR.MINOR.PATCH", id="shorthand-empty-prerelease"),
        pytest.param("V1.2.3", "lowercase 'v'", id="capital-v"),
        pytest.param("vv1.2.3", "expected MAJOR.MINOR.PATCH", id="double-v"),
        pytest.param("v", "expected MAJOR.MINOR.PATCH", id="v-alone"),
        pytest.param(" 1.2.3", "expected MAJOR.MINOR.PATCH", id="leading-space"),
        pytest.param("1.2.3\n", "expected MAJOR.MINOR.PATCH", id="trailing-newline"),
        pytest.param("\u0661.2.3", "expected MAJOR.MINOR.PATCH", id="non-ascii-digit"),
        pytest.param("", "is not a version", id="empty"),
    ],
)  # fmt: skip
def test_spec_versions_reject_what_upstream_rejects(text: str, message: str) -> None:
    with pytest.raises(VersionError, match=message) as raised:
        parse_spec_version(text)
    assert str(raised.value).startswith(repr(text))
    with pytest.raises(VersionError):
        compare_versions(text, "1.0.0")


@st.composite
def spellings(draw: st.DrawFn) -> tuple[str, str]:
    """Any spelling upstream accepts, and the strict version it stands for."""
    prefix = draw(st.sampled_from(["", "v"]))
    if draw(st.booleans()):
        parts = [str(draw(numbers)) for _ in range(draw(st.integers(1, 2)))]
        return prefix + ".".join(parts), ".".join([*parts, "0", "0"][:3])
    strict = draw(versions())
    return prefix + strict, strict


@given(spellings())
def test_normalized_form_round_trips(spelling: tuple[str, str]) -> None:
    text, strict = spelling
    version = parse_spec_version(text)
    assert version.normalized == strict
    assert (version.warning is None) == (text == strict)
    again = parse_spec_version(version.normalized)
    assert (again.normalized, again.warning) == (strict, None)
    assert str(parse_version(version.normalized)) == strict


@given(spellings(), spellings())
def test_ordering_of_spellings_is_strict_semver_on_normalized_forms(
    a: tuple[str, str], b: tuple[str, str]
) -> None:
    expected = semver.Version.parse(a[1]).compare(semver.Version.parse(b[1]))
    assert compare_versions(a[0], b[0]) == expected
    assert compare_versions(a[0], b[1]) == expected


@given(versions())
def test_strict_versions_are_spec_versions_unchanged(text: str) -> None:
    version = parse_spec_version(text)
    assert (version.normalized, version.warning) == (text, None)


package_names = st.from_regex(r"\A[a-z][a-z0-9_-]{0,20}[a-z0-9]\Z")


@given(package_names, versions())
def test_tag_round_trip(package: str, version: str) -> None:
    tag = PackageTag(package, version)
    assert parse_tag(str(tag)) == tag


@pytest.mark.parametrize(
    "tag",
    [
        "shellscript",
        "shellscript/",
        "/1.0.0",
        "shellscript/v1.0.0",
        "shellscript/1.0",
        "Shell/1.0.0",
        "a/b/1.0.0",
        "shellscript/1.0.0/extra",
    ],
)
def test_malformed_tags_are_rejected(tag: str) -> None:
    with pytest.raises(TagError, match="tag"):
        parse_tag(tag)


def make_package(root: Path, version: str) -> Path:
    document = shellscript()
    document["package_version"] = version
    package = root / "shellscript"
    (package / "skyhook_dir").mkdir(parents=True)
    for path in step_paths(document):
        (package / "skyhook_dir" / path).write_text("#!/bin/bash\n")
    (package / "config.json").write_text(json.dumps(document))
    return root


def test_tag_must_match_config_version(tmp_path: Path) -> None:
    root = make_package(tmp_path, "1.1.1")
    assert check_tag("shellscript/1.1.1", root) == []
    [error] = check_tag("shellscript/1.2.0", root)
    assert error.path == "package_version"
    assert "says '1.1.1' but the tag says '1.2.0'" in error.message


def test_tag_of_unknown_or_invalid_package(tmp_path: Path) -> None:
    root = make_package(tmp_path, "1.1.1")
    assert "no package 'tuned'" in check_tag("tuned/1.0.0", root)[0].message
    (root / "shellscript" / "skyhook_dir" / "shellscript_run.sh").unlink()
    paths = [error.path for error in check_tag("shellscript/1.1.1", root)]
    assert "modes.apply[0].path" in paths
