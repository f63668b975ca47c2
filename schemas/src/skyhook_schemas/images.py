"""Container image references: ``[registry[:port]/]path[:tag][@digest]``, split correctly.

A colon before the last ``/`` belongs to a registry port (``host:5000/repo``), never to a tag;
the digest follows ``@``. The grammar is the one container registries use (repository path
components are lowercase, a tag is at most 128 characters), so a reference that splits here is
one a kubelet can pull. A digest is checked as the kubelet's parser checks it: an algorithm it
knows, with exactly that algorithm's number of lowercase hex digits.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
_PATH_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REPOSITORY = re.compile(rf"(?:{_DOMAIN}/)?{_PATH_PART}(?:/{_PATH_PART})*", re.ASCII)
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", re.ASCII)
# The longest repository (registry and path) a registry accepts.
MAX_REPOSITORY = 255
# The digest algorithms image references may use, with the length of their hex encoding.
DIGEST_HEX_LENGTHS = {"sha256": 64, "sha384": 96, "sha512": 128}


class ImageError(ValueError):
    """An image reference that no registry would accept; the message names the bad part."""


@dataclass(frozen=True)
class ImageReference:
    repository: str
    """Registry and path, without tag or digest: ``host:5000/team/tuning``."""
    tag: str | None
    digest: str | None
    """``algorithm:hex``, such as ``sha256:...``."""


def split_image(reference: str) -> ImageReference:
    """Split ``reference`` into repository, tag and digest; ImageError when it is malformed."""
    if not isinstance(reference, str) or not reference:
        raise ImageError(f"{reference!r} is not an image reference: expected e.g. ghcr.io/org/pkg")
    repository, tag, digest = _parts(reference)
    if len(repository) > MAX_REPOSITORY:
        raise ImageError(
            f"{reference!r}: repository is {len(repository)} characters; at most "
            f"{MAX_REPOSITORY} are allowed"
        )
    if not _REPOSITORY.fullmatch(repository):
        raise ImageError(
            f"{reference!r}: repository {repository!r} is not valid (lowercase path parts of "
            "letters, digits and . _ -, after an optional registry host[:port]/)"
        )
    if tag is not None and not _TAG.fullmatch(tag):
        raise ImageError(
            f"{reference!r}: tag {tag!r} is not valid (up to 128 letters, digits, _ . -, "
            "not starting with . or -)"
        )
    if digest is not None and (problem := digest_problem(digest)):
        raise ImageError(f"{reference!r}: {problem}")
    return ImageReference(repository, tag, digest)


def digest_problem(digest: str) -> str | None:
    """Why ``digest`` (``algorithm:hex``) is not one a kubelet can pull by, or None."""
    algorithm, colon, encoded = digest.partition(":")
    length = DIGEST_HEX_LENGTHS.get(algorithm)
    if not colon or length is None:
        known = ", ".join(DIGEST_HEX_LENGTHS)
        return f"digest {digest!r} is not valid: expected <algorithm>:<hex> with algorithm {known}"
    if len(encoded) != length or not re.fullmatch(r"[0-9a-f]*", encoded):
        return f"digest {digest!r} is not valid: {algorithm} takes {length} lowercase hex digits"
    return None


def image_tag(reference: str) -> str:
    """The tag of a reference, valid or not: `repo:1.2@sha256:<hex>` -> `1.2`; empty when
    there is none (a registry port such as `host:5000/repo` is not a tag)."""
    return _parts(reference)[1] or ""


def image_without_tag(reference: str) -> str:
    """The reference without its tag, a digest kept: `repo:1.2@sha256:<hex>` ->
    `repo@sha256:<hex>`, `host:5000/repo:1.2` -> `host:5000/repo`."""
    repository, _, digest = _parts(reference)
    return f"{repository}@{digest}" if digest is not None else repository


def _parts(reference: str) -> tuple[str, str | None, str | None]:
    """(repository, tag, digest) as the reference spells them, unchecked."""
    name, at, digest = reference.partition("@")
    colon = name.rfind(":")
    if colon > name.rfind("/"):
        return name[:colon], name[colon + 1 :], digest if at else None
    return name, None, digest if at else None


def tag_mismatch_warning(image: ImageReference, version: str) -> str | None:
    """A warning when an SCR package image carries a tag other than the package ``version``:
    the version is the tag stage pods pull, so the image's own tag is ignored."""
    if image.tag is None or image.tag == version:
        return None
    return f"image tag {image.tag!r} differs from version {version!r}; the version is the tag used"
