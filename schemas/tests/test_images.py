from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from skyhook_schemas.images import ImageError, ImageReference, split_image, tag_mismatch_warning

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("reference", "repository", "tag", "digest"),
    [
        pytest.param("ghcr.io/nvidia/skyhook-packages/tuning", "ghcr.io/nvidia/skyhook-packages/tuning",
                     None, None, id="repository-only"),
        pytest.param("ghcr.io/org/tuning:1.1.4", "ghcr.io/org/tuning", "1.1.4", None, id="tag"),
        pytest.param("registry:5000/img", "registry:5000/img", None, None, id="port-is-not-a-tag"),
        pytest.param("registry:5000/team/img:1.2", "registry:5000/team/img", "1.2", None,
                     id="port-and-tag"),
        pytest.param(f"repo@{DIGEST}", "repo", None, DIGEST, id="digest"),
        pytest.param(f"repo:1.2@{DIGEST}", "repo", "1.2", DIGEST, id="tag-and-digest"),
        pytest.param(f"localhost:5000/repo:v1@{DIGEST}", "localhost:5000/repo", "v1", DIGEST,
                     id="port-tag-digest"),
        pytest.param("[::1]:5000/repo:1.0.0", "[::1]:5000/repo", "1.0.0", None, id="ipv6-registry"),
        pytest.param("tuning", "tuning", None, None, id="bare-name"),
        pytest.param("my_org/pkg.name--x:Tag_1.0-rc", "my_org/pkg.name--x", "Tag_1.0-rc", None,
                     id="separators"),
    ],
)  # fmt: skip
def test_split_image(reference: str, repository: str, tag: str | None, digest: str | None) -> None:
    assert split_image(reference) == ImageReference(repository, tag, digest)


@pytest.mark.parametrize(
    ("reference", "message"),
    [
        pytest.param("", "is not an image reference", id="empty"),
        pytest.param("repo:", "tag '' is not valid", id="empty-tag"),
        pytest.param("repo:-x", "tag '-x' is not valid", id="tag-starts-with-dash"),
        pytest.param("repo:" + "a" * 129, "tag 'a+' is not valid", id="tag-too-long"),
        pytest.param("Org/Repo:1.0", "repository 'Org/Repo' is not valid", id="uppercase-path"),
        pytest.param("host:5000/", "repository 'host:5000/' is not valid", id="no-path"),
        pytest.param("repo@sha256", "digest 'sha256' is not valid", id="digest-without-hex"),
        pytest.param("repo@", "digest '' is not valid", id="empty-digest"),
        pytest.param("repo@md5:" + "ab" * 16, "algorithm sha256", id="digest-unknown-algorithm"),
        pytest.param("repo@sha256:abc", "sha256 takes 64 lowercase hex", id="digest-too-short"),
        pytest.param("repo@sha256:" + "AB" * 32, "sha256 takes 64", id="digest-uppercase"),
        pytest.param("repo@sha512:" + "ab" * 32, "sha512 takes 128", id="digest-wrong-length"),
        pytest.param("a/" * 127 + "ab", "at most 255", id="repository-too-long"),
        pytest.param("repo name", "repository 'repo name' is not valid", id="space"),
    ],
)
def test_malformed_images_are_rejected_naming_the_part(reference: str, message: str) -> None:
    with pytest.raises(ImageError, match=message):
        split_image(reference)


@pytest.mark.parametrize(
    ("image", "version", "warning"),
    [
        pytest.param("repo", "1.2.0", None, id="no-tag"),
        pytest.param("repo:1.2.0", "1.2.0", None, id="same-tag"),
        pytest.param("host:5000/repo", "1.2.0", None, id="port-only"),
        pytest.param("repo:1.1.0", "1.2.0",
                     "image tag '1.1.0' differs from version '1.2.0'; the version is the tag used",
                     id="other-tag"),
        pytest.param("repo:v1.2.0", "1.2.0",
                     "image tag 'v1.2.0' differs from version '1.2.0'; the version is the tag used",
                     id="other-spelling"),
    ],
)  # fmt: skip
def test_tag_mismatch_warning(image: str, version: str, warning: str | None) -> None:
    assert tag_mismatch_warning(split_image(image), version) == warning


path_parts = st.from_regex(r"\A[a-z0-9]+([._-][a-z0-9]+){0,2}\Z")
registries = st.one_of(
    st.just(""),
    st.from_regex(r"\A[a-z0-9]{1,8}(\.[a-z0-9]{1,8}){0,2}(:[0-9]{1,5})?/\Z"),
)
tags = st.one_of(st.none(), st.from_regex(r"\A[A-Za-z0-9_][A-Za-z0-9_.-]{0,20}\Z"))
digests = st.one_of(st.none(), st.from_regex(r"\Asha256:[0-9a-f]{64}\Z"))


@given(registries, st.lists(path_parts, min_size=1, max_size=3), tags, digests)
def test_split_image_round_trips(
    registry: str, path: list[str], tag: str | None, digest: str | None
) -> None:
    repository = registry + "/".join(path)
    reference = repository + (f":{tag}" if tag else "") + (f"@{digest}" if digest else "")
    assert split_image(reference) == ImageReference(repository, tag, digest)
