"""Fetching image compatibility artifacts: from a ConfigMap through the API, from an OCI
registry with ORAS (oras-py).

Everything runs on the event loop except ORAS's requests: oras-py is a blocking library (on
`requests`), so a registry call goes to a worker thread (`asyncio.to_thread`), the one thread
crossing here, made only when a source is fetched, not answered from cache.

ORAS itself is imported on the first OCI fetch (kube/oci.py).

An OCI artifact is a manifest whose layer of media type
`application/vnd.oci.image.compatibilities.v1+json` (or NFD's YAML layer) holds the artifact.
Artifacts are cached by that layer's digest: a reference is looked up again (its manifest
only) at most every `refresh` seconds, and its layer is pulled only when the digest changed.
`ArtifactResolver.resolve` gives the planner every source its Skyhooks name
(`ClusterSnapshot.image_artifacts`); `fetch_for_pod` is the pod webhook's fetch.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from skyhook_operator.kube.client import ApiError, AsyncKube
from skyhook_planner.model.imagecompat import (
    IMAGE_REF_ANNOTATION,
    MEDIA_TYPES,
    Artifact,
    ArtifactError,
    PodDecision,
    artifact_reference,
    parse_text,
    pod_patch,
)
from skyhook_planner.model.snapshot import SkyhookView
from skyhook_planner.model.spec import ImageCompatibility

log = logging.getLogger(__name__)


class FetchError(Exception):
    """An artifact that could not be had; the message says which source and why."""


@dataclass
class _Checked:
    at: float
    result: Artifact | str


class ArtifactFetcher:
    """Pulls artifacts; keeps each parsed artifact by layer digest and each source's last
    answer for `refresh` seconds. Use it from one event loop (`fetch`); the lock guards what
    `fetch_oci`, in worker threads, shares."""

    def __init__(
        self, kube: AsyncKube | None, namespace: str, refresh: float, insecure: Iterable[str] = ()
    ) -> None:
        self._kube = kube
        self._namespace = namespace
        self._refresh = refresh
        self._insecure = {host.strip() for host in insecure if host.strip()}
        self._by_digest: dict[str, Artifact] = {}
        self._checked: dict[str, _Checked] = {}
        self._lock = threading.Lock()
        self.pulls = 0  # layers actually downloaded (the cache's misses)

    async def fetch(self, source: ImageCompatibility) -> Artifact | str:
        """The artifact `source` names, or why it cannot be had (an error message naming the
        source), answered from cache when checked within `refresh` seconds."""
        if source.inline is not None:
            return source.inline
        key = source.source
        now = time.monotonic()
        checked = self._checked.get(key)
        if checked is not None and now - checked.at < self._refresh:
            return checked.result
        result: Artifact | str
        try:
            if source.config_map is not None:
                result = await self._from_config_map(*source.config_map)
            else:
                # ORAS blocks on the network (requests, up to REQUEST_TIMEOUT_S a call): in a
                # worker thread, so the loop's watches and writes go on meanwhile.
                result = await asyncio.to_thread(self.fetch_oci, source.ref)
        except FetchError as err:
            result = str(err)
        self._checked[key] = _Checked(now, result)
        return result

    async def _from_config_map(self, name: str, item: str) -> Artifact:
        where = f"ConfigMap {self._namespace}/{name} key {item}"
        if self._kube is None:
            raise FetchError(f"{where}: no API client")
        try:
            body = await self._kube.request(
                "GET", AsyncKube.namespaced_path("configmaps", self._namespace, name)
            )
        except ApiError as err:
            raise FetchError(f"{where}: {err.reason}") from None
        data = (body.get("data") or {}) if isinstance(body, Mapping) else {}
        if item not in data:
            raise FetchError(f"{where}: no such key")
        try:
            return parse_text(data[item], where=where)
        except ArtifactError as err:
            raise FetchError(str(err)) from None

    def fetch_oci(self, reference: str) -> Artifact:
        """Resolve `reference`'s manifest, then its artifact layer (from cache when its
        digest is known). Blocking: `fetch` calls it in a worker thread. FetchError names the
        reference and what failed."""
        from skyhook_operator.kube import oci  # noqa: PLC0415 - ORAS loads on first use

        host = reference.split("/", 1)[0]
        try:
            manifest = oci.Manifest(reference, insecure=host in self._insecure)
        except oci.RegistryError as err:
            raise FetchError(f"OCI artifact {reference}: {err}") from None
        layer = next(
            (x for x in manifest.body.get("layers") or () if x.get("mediaType") in MEDIA_TYPES),
            None,
        )
        if layer is None:
            raise FetchError(
                f"OCI artifact {reference}: no layer of media type {' or '.join(MEDIA_TYPES)}"
            )
        digest = str(layer.get("digest"))
        with self._lock:
            cached = self._by_digest.get(digest)
        if cached is not None:
            return cached
        try:
            content = manifest.blob(digest)
        except oci.RegistryError as err:
            raise FetchError(f"OCI artifact {reference}: layer {digest}: {err}") from None
        self.pulls += 1
        try:
            artifact = parse_text(content, layer["mediaType"], where=f"OCI artifact {reference}")
        except ArtifactError as err:
            raise FetchError(str(err)) from None
        with self._lock:
            self._by_digest[digest] = artifact
        log.info("image compatibility artifact %s pulled (layer %s)", reference, digest)
        return artifact


def sources(skyhooks: Iterable[SkyhookView]) -> list[ImageCompatibility]:
    """The artifact sources the Skyhooks name that must be fetched (not inline), each once, in
    the Skyhooks' order; none for a Skyhook being deleted."""
    named: dict[str, ImageCompatibility] = {}
    for scr in skyhooks:
        if scr.spec is None or scr.deleting:
            continue
        for package in scr.spec.packages.values():
            source = package.image_compatibility
            if source is not None and source.inline is None:
                named.setdefault(source.source, source)
    return list(named.values())


class ArtifactResolver:
    """The planner's input: every artifact source named by the Skyhooks, fetched."""

    def __init__(self, fetcher: ArtifactFetcher) -> None:
        self.fetcher = fetcher

    async def resolve(self, skyhooks: Iterable[SkyhookView]) -> dict[str, Artifact | str]:
        """On the loop: with no source named it returns at once, and a source checked within
        `refresh` seconds is answered from cache; only a registry fetch leaves the loop."""
        return {source.source: await self.fetcher.fetch(source) for source in sources(skyhooks)}


async def fetch_for_pod(fetcher: ArtifactFetcher, reference: str) -> Artifact:
    """The artifact a pod's `oci.image.compatibilities.selection/image-ref` annotation names
    (an OCI reference). Raises FetchError (message ready for an admission refusal)."""
    result = await fetcher.fetch(ImageCompatibility(ref=reference))
    if isinstance(result, str):
        raise FetchError(result)
    return result


async def pod_image_patch(
    fetcher: ArtifactFetcher, pod: Mapping[str, Any], node_labels: Iterable[Mapping[str, str]]
) -> PodDecision:
    """The pod image webhook's whole answer for one pod: fetch the artifact its annotation
    names, then `pod_patch`. Every failure is a refusal that says why."""
    reference = artifact_reference(pod)
    if not reference:
        return PodDecision(
            refusal=f"image compatibility: the pod has no {IMAGE_REF_ANNOTATION} annotation"
        )
    try:
        artifact = await fetch_for_pod(fetcher, reference)
    except FetchError as err:
        return PodDecision(refusal=f"image compatibility: {err}")
    # pod_patch matches every node the pod may land on: 6 ms at 1,000 nodes, 31-34 ms at
    # 5,000 (27 labels a node, 3 candidates): in a thread, not holding the loop that long.
    return await asyncio.to_thread(pod_patch, pod, list(node_labels), artifact)
