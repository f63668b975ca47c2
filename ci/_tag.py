"""What a release tag names, checked against the checkout (ci/tag-info, ci/publish-*).

A tag is `<component>/vX.Y.Z`, or `<package>/X.Y.Z` for a package under packages/ (the tags
ci/release makes). Its version must be the one the component's files declare at the tagged
commit, so what a tag push publishes always carries the version its tag names.
"""

from __future__ import annotations

from dataclasses import dataclass

from _release import ReleaseError, current_version, find_component

from skyhook_schemas.versions import VersionError, parse_version

# What a tag push publishes per component; packages publish an image, others nothing (the
# libraries the published parts are built from).
PUBLISHED = {"agent": "image", "operator": "image", "cli": "cli", "chart": "chart"}


class TagError(ValueError):
    """The tag names no release of this checkout; the message says why."""


@dataclass(frozen=True)
class ReleaseTag:
    component: str
    version: str  # without a leading v
    publish: str  # image, package, cli, chart or none

    def lines(self) -> list[str]:
        """`key=value` lines, the format of $GITHUB_OUTPUT."""
        return [f"component={self.component}", f"version={self.version}", f"publish={self.publish}"]


def read_tag(tag: str, expect: str | None = None) -> ReleaseTag:
    """``tag`` checked against the checkout; with ``expect``, it must publish that kind."""
    name, slash, _ = tag.partition("/")
    if not slash:
        raise TagError(
            f"tag {tag!r} must be <component>/vX.Y.Z or <package>/X.Y.Z, e.g. operator/v0.2.0"
        )
    try:
        component = find_component(name)
    except ReleaseError as error:
        raise TagError(f"tag {tag!r}: {error}") from None
    if not tag.startswith(component.tag_prefix):
        raise TagError(f"tag {tag!r}: {name} tags look like {component.tag('X.Y.Z')}")
    version = tag.removeprefix(component.tag_prefix)
    try:
        parsed = parse_version(version)
    except VersionError as error:
        raise TagError(f"tag {tag!r}: {error}") from None
    if parsed.build:
        raise TagError(f"tag {tag!r}: build metadata (+{parsed.build}) cannot name a release")
    try:
        declared = current_version(component)
    except ReleaseError as error:
        raise TagError(f"tag {tag!r}: {error}") from None
    if declared != version:
        raise TagError(
            f"tag {tag!r}: {component.directory} declares version {declared}, not {version}; "
            "tag the release commit ci/release made"
        )
    publish = "package" if component.kind == "package" else PUBLISHED.get(name, "none")
    if expect is not None and publish != expect:
        raise TagError(f"tag {tag!r} publishes {publish}, not {expect}")
    return ReleaseTag(component.name, version, publish)
