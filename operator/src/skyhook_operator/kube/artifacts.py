"""Fetching image compatibility artifacts: from a ConfigMap through the API, from an OCI
registry with ORAS (oras-py).

Everything runs on the event loop except ORAS's requests: oras-py is a blocking library (on
`requests`), so a registry call goes to a worker thread, the one thread crossing here, made
only when a source is fetched, not answered from cache. The pod webhook's fetcher has a small
pool of its own (`pod_executor`), so pods naming artifacts never take the threads the planner
runs on.

ORAS itself is imported on the first OCI fetch (kube/oci.py).

An OCI artifact is a manifest whose layer of media type
`application/vnd.oci.image.compatibilities.v1+json` (or NFD's YAML layer) holds the artifact.
Artifacts are cached by that layer's digest: a reference is looked up again (its manifest
only) at most every `refresh` seconds, and its layer is pulled only when the digest changed.
Both caches keep at most `cache_entries` entries, the least recently used dropped first.
Only registries on the allowlist are asked (`allowed_registries`: the hosts the Skyhooks'
packages name, and those the operator is given); every response is read up to `max_bytes`.
`ArtifactResolver.resolve` gives the planner every source its Skyhooks name
(`ClusterSnapshot.image_artifacts`); `fetch_for_pod` is the pod webhook's fetch.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Mapping
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any, Generic, TypeVar

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

# The largest manifest or layer read (SKYHOOK_IMAGE_ARTIFACT_MAX_BYTES's default): an
# artifact is a list of candidates, a few KiB.
DEFAULT_MAX_BYTES = 1024 * 1024
# Entries each cache keeps at most (SKYHOOK_IMAGE_ARTIFACT_CACHE_SIZE's default).
DEFAULT_CACHE_ENTRIES = 256
# Threads the pod webhook fetches on: a burst of pods waits its turn here, not in the pool
# the planner's passes run on.
POD_FETCH_THREADS = 2
# The settings that widen the limits, named in the refusals.
REGISTRIES_SETTING = "SKYHOOK_IMAGE_ARTIFACT_REGISTRIES"
MAX_BYTES_SETTING = "SKYHOOK_IMAGE_ARTIFACT_MAX_BYTES"
# Docker Hub, the registry of a reference without a host, as ORAS reads it.
DEFAULT_REGISTRY = "docker.io"


class FetchError(Exception):
    """An artifact that could not be had; the message says which source and why."""


Value = TypeVar("Value")


class BoundedCache(Generic[Value]):
    """At most `max_entries` values, each for `ttl` seconds (None: until evicted); the least
    recently used is dropped first. Not thread-safe: callers that share it lock around it.
    OrderedDict, not a library: cachetools is not a dependency, and this is the whole need."""

    def __init__(
        self,
        max_entries: int,
        ttl: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_entries = max_entries
        self._ttl = ttl
        self._clock = clock
        self._entries: OrderedDict[str, tuple[float, Value]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> Value | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if self._ttl is not None and self._clock() - entry[0] >= self._ttl:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return entry[1]

    def put(self, key: str, value: Value) -> None:
        self._entries[key] = (self._clock(), value)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)


def registry_host(reference: str) -> str:
    """The registry `reference` is fetched from, as ORAS reads it: the first path part when it
    has a `.` or a `:` (`ghcr.io`, `registry.local:5000`), otherwise Docker Hub."""
    first, slash, _ = reference.partition("/")
    return first if slash and ("." in first or ":" in first) else DEFAULT_REGISTRY


def allowed_registries(skyhooks: Iterable[SkyhookView], extra: Iterable[str]) -> frozenset[str]:
    """The registries artifacts may come from: the hosts of every package's image and OCI
    artifact the Skyhooks name, and `extra` (the operator's setting)."""
    hosts = {host.strip() for host in extra if host.strip()}
    for scr in skyhooks:
        if scr.spec is None:
            continue
        for package in scr.spec.packages.values():
            hosts.add(registry_host(package.image))
            source = package.image_compatibility
            if source is not None and source.ref:
                hosts.add(registry_host(source.ref))
    return frozenset(hosts)


def pod_executor() -> ThreadPoolExecutor:
    """The pod webhook's own threads (POD_FETCH_THREADS)."""
    return ThreadPoolExecutor(POD_FETCH_THREADS, thread_name_prefix="skyhook-pod-image")


class ArtifactFetcher:
    """Pulls artifacts; keeps parsed artifacts by layer digest and each source's last answer
    for `refresh` seconds, each cache bounded to `cache_entries`. Only registries
    `registries()` lists are asked, and no response over `max_bytes` is read. Use it from one
    event loop (`fetch`); registry calls run on `executor` (None: the loop's default), and the
    lock guards what `fetch_oci`, in those threads, shares."""

    def __init__(
        self,
        kube: AsyncKube | None,
        namespace: str,
        refresh: float,
        insecure: Iterable[str] = (),
        *,
        registries: Callable[[], Collection[str]] = frozenset,
        max_bytes: int = DEFAULT_MAX_BYTES,
        cache_entries: int = DEFAULT_CACHE_ENTRIES,
        executor: Executor | None = None,
    ) -> None:
        self._kube = kube
        self._namespace = namespace
        self._insecure = {host.strip() for host in insecure if host.strip()}
        self._registries = registries
        self._max_bytes = max_bytes
        self._executor = executor
        self._by_digest: BoundedCache[Artifact] = BoundedCache(cache_entries)
        self._checked: BoundedCache[Artifact | str] = BoundedCache(cache_entries, ttl=refresh)
        self._lock = threading.Lock()
        self.pulls = 0  # layers actually downloaded (the cache's misses)

    async def in_thread(self, call: Callable[..., Value], *args: Any) -> Value:
        """`call(*args)` on the fetcher's threads."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(call, *args))

    async def fetch(self, source: ImageCompatibility) -> Artifact | str:
        """The artifact `source` names, or why it cannot be had (an error message naming the
        source), answered from cache when checked within `refresh` seconds. A reference to a
        registry not on the allowlist is refused without a request, cached or not."""
        if source.inline is not None:
            return source.inline
        allowed = frozenset(self._registries())
        if source.config_map is None:
            host = registry_host(source.ref)
            if host not in allowed:
                return (
                    f"OCI artifact {source.ref}: registry {host} is not allowed: artifacts are "
                    "fetched only from the registries the Skyhooks' packages name and those in "
                    f"{REGISTRIES_SETTING}"
                )
        key = source.source
        cached = self._checked.get(key)
        if cached is not None:
            return cached
        result: Artifact | str
        try:
            if source.config_map is not None:
                result = await self._from_config_map(*source.config_map)
            else:
                # ORAS blocks on the network (requests, up to REQUEST_TIMEOUT_S a call): in a
                # worker thread, so the loop's watches and writes go on meanwhile.
                result = await self.in_thread(self.fetch_oci, source.ref, allowed)
        except FetchError as err:
            result = str(err)
        self._checked.put(key, result)
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

    def fetch_oci(self, reference: str, allowed: Collection[str]) -> Artifact:
        """Resolve `reference`'s manifest, then its artifact layer (from cache when its
        digest is known), following redirects only to `allowed` hosts. Blocking: `fetch`
        calls it in a worker thread. FetchError names the reference and what failed."""
        from skyhook_operator.kube import oci  # noqa: PLC0415 - ORAS loads on first use

        host = registry_host(reference)
        try:
            manifest = oci.Manifest(
                reference, host in self._insecure, allowed=allowed, max_bytes=self._max_bytes
            )
        except oci.RegistryError as err:
            raise FetchError(f"OCI artifact {reference}: {_explained(err)}") from None
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
            raise FetchError(
                f"OCI artifact {reference}: layer {digest}: {_explained(err)}"
            ) from None
        self.pulls += 1
        try:
            artifact = parse_text(content, layer["mediaType"], where=f"OCI artifact {reference}")
        except ArtifactError as err:
            raise FetchError(str(err)) from None
        with self._lock:
            self._by_digest.put(digest, artifact)
        log.info("image compatibility artifact %s pulled (layer %s)", reference, digest)
        return artifact


def _explained(err: Exception) -> str:
    """A registry error, with the setting that widens the limit it hit."""
    from skyhook_operator.kube import oci  # noqa: PLC0415 - loaded already: it raised `err`

    if isinstance(err, oci.NotAllowed):
        return f"{err}: add it to {REGISTRIES_SETTING} to follow it"
    if isinstance(err, oci.TooLarge):
        return f"{err} ({MAX_BYTES_SETTING})"
    return str(err)


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
    return await fetcher.in_thread(pod_patch, pod, list(node_labels), artifact)
