"""The artifact resolver before each pass: on the loop, leaving it only for a registry fetch."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Collection, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import requests

from skyhook_operator.kube import artifacts
from skyhook_operator.kube.artifacts import (
    ArtifactFetcher,
    ArtifactResolver,
    BoundedCache,
    FetchError,
    allowed_registries,
    fetch_for_pod,
    pod_executor,
    pod_image_patch,
    registry_host,
)
from skyhook_planner.model.imagecompat import IMAGE_REF_ANNOTATION, Artifact, parse, pod_patch
from skyhook_planner.model.snapshot import SkyhookView
from skyhook_planner.sim.driver import package

OS_ID = "feature.node.kubernetes.io/system-os_release.ID"
UBUNTU = {"matchFeatures": [{"matchExpressions": {OS_ID: {"op": "In", "value": ["ubuntu"]}}}]}
ARTIFACT = {
    "version": "v1alpha1",
    "compatibilities": [{"tag": "repo/tuning:1.0.0-ubuntu", "rules": [UBUNTU]}],
}


def skyhook(name: str, **compatibility: Any) -> SkyhookView:
    extra = {"imageCompatibility": compatibility} if compatibility else {}
    spec = {"packages": {"tuning": package(image="repo/tuning", **extra)}}
    return SkyhookView.from_api({"metadata": {"name": name}, "spec": spec})


class Registry:
    """Stands in for ORAS: counts fetches and remembers which thread made them."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []

    def fetch_oci(self, reference: str, allowed: Collection[str]) -> Artifact:
        self.threads.append(threading.current_thread())
        return parse(ARTIFACT)


@pytest.fixture
def crossings(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What the artifacts module handed to a worker thread."""
    handed: list[str] = []
    in_thread = ArtifactFetcher.in_thread

    async def counted(self: ArtifactFetcher, fn: Any, *args: Any) -> Any:
        handed.append(getattr(fn, "__name__", repr(fn)))
        return await in_thread(self, fn, *args)

    monkeypatch.setattr(ArtifactFetcher, "in_thread", counted)
    return handed


def resolver(registry: Registry, refresh: float = 60.0) -> ArtifactResolver:
    fetcher = ArtifactFetcher(None, "skyhook", refresh, registries=lambda: {"registry.example"})
    fetcher.fetch_oci = registry.fetch_oci  # type: ignore[method-assign]
    return ArtifactResolver(fetcher)


def test_no_skyhook_naming_an_artifact_stays_on_the_loop(crossings: list[str]) -> None:
    registry = Registry()
    inline = skyhook("inline", inline=ARTIFACT)
    assert inline.spec is not None  # a valid spec, whose artifact needs no fetch
    found = asyncio.run(resolver(registry).resolve([skyhook("plain"), inline]))
    assert found == {} and crossings == [] and registry.threads == []


def test_a_registry_fetch_leaves_the_loop_once_then_answers_from_cache(
    crossings: list[str],
) -> None:
    registry = Registry()
    resolve = resolver(registry).resolve
    named = [
        skyhook("a", ref="registry.example/compat:v1"),
        skyhook("b", ref="registry.example/compat:v1"),
    ]

    async def passes() -> tuple[threading.Thread, list[dict[str, Any]]]:
        return threading.current_thread(), [await resolve(named) for _ in range(3)]

    loop_thread, answers = asyncio.run(passes())
    assert all(list(a) == ["oci:registry.example/compat:v1"] for a in answers)
    assert crossings == ["fetch_oci"]
    assert len(registry.threads) == 1 and registry.threads[0] is not loop_thread


# --- bounds: any pod author names an artifact ---------------------------------------------


def test_the_cache_keeps_the_most_recently_used_entries_for_their_ttl() -> None:
    now = [0.0]
    cache: BoundedCache[str] = BoundedCache(2, ttl=10, clock=lambda: now[0])
    cache.put("a", "A")
    cache.put("b", "B")
    assert cache.get("a") == "A"  # a is now the most recently used
    cache.put("c", "C")
    assert (len(cache), cache.get("b"), cache.get("a"), cache.get("c")) == (2, None, "A", "C")
    now[0] = 10.0
    assert cache.get("a") is None and len(cache) == 1


def test_the_registry_of_a_reference_is_the_one_oras_asks() -> None:
    assert registry_host("ghcr.io/acme/compat:v1") == "ghcr.io"
    assert registry_host("registry.local:5000/compat@sha256:" + "0" * 64) == "registry.local:5000"
    assert registry_host("127.0.0.1:5000/compat:v1") == "127.0.0.1:5000"
    assert registry_host("acme/compat:v1") == "docker.io"
    assert registry_host("compat") == "docker.io"


def test_the_allowlist_is_the_skyhooks_registries_and_the_settings() -> None:
    named = [
        skyhook("image-only"),
        SkyhookView.from_api(
            {
                "metadata": {"name": "oci"},
                "spec": {
                    "packages": {
                        "tuning": package(
                            image="ghcr.io/acme/tuning",
                            imageCompatibility={"ref": "registry.local:5000/compat:v1"},
                        )
                    }
                },
            }
        ),
        SkyhookView.from_api({"metadata": {"name": "invalid"}, "spec": {"packages": 3}}),
    ]
    assert allowed_registries(named, [" mirror.example ", ""]) == {
        "docker.io",  # repo/tuning
        "ghcr.io",
        "registry.local:5000",
        "mirror.example",
    }


def test_a_reference_off_the_allowlist_is_refused_without_a_fetch(
    crossings: list[str],
) -> None:
    registry = Registry()
    fetcher = ArtifactFetcher(None, "skyhook", 60, registries=lambda: {"ghcr.io"})
    fetcher.fetch_oci = registry.fetch_oci  # type: ignore[method-assign]
    with pytest.raises(FetchError) as refused:
        asyncio.run(fetch_for_pod(fetcher, "evil.example:8443/compat:v1"))
    assert str(refused.value) == (
        "OCI artifact evil.example:8443/compat:v1: registry evil.example:8443 is not allowed: "
        "artifacts are fetched only from the registries the Skyhooks' packages name and those "
        "in SKYHOOK_IMAGE_ARTIFACT_REGISTRIES"
    )
    assert crossings == [] and registry.threads == []


def test_the_pod_webhook_fetches_and_decides_on_its_own_threads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    registry = Registry()
    executor = pod_executor()
    fetcher = ArtifactFetcher(
        None, "skyhook", 60, registries=lambda: {"ghcr.io"}, executor=executor
    )
    fetcher.fetch_oci = registry.fetch_oci  # type: ignore[method-assign]
    deciding: list[str] = []

    def recorded_pod_patch(*args: Any) -> Any:
        deciding.append(threading.current_thread().name)
        return pod_patch(*args)

    monkeypatch.setattr(artifacts, "pod_patch", recorded_pod_patch)
    pod = {
        "metadata": {"annotations": {IMAGE_REF_ANNOTATION: "ghcr.io/acme/compat:v1"}},
        "spec": {"containers": [{"name": "c", "image": "placeholder:latest"}]},
    }
    try:
        decision = asyncio.run(pod_image_patch(fetcher, pod, [{OS_ID: "ubuntu"}]))
    finally:
        executor.shutdown()
    assert decision.allowed
    threads = [thread.name for thread in registry.threads] + deciding
    assert len(threads) == 2 and all(t.startswith("skyhook-pod-image") for t in threads)


class _Handler(BaseHTTPRequestHandler):
    """/big: 10 KiB, chunked (no Content-Length); /declared: a Content-Length of 10 KiB;
    /small: 3 bytes; /to/<url>: a redirect to <url>. Every path asked is recorded."""

    protocol_version = "HTTP/1.1"
    asked: list[str]

    def do_GET(self) -> None:
        self.asked.append(self.path)
        if self.path.startswith("/to/"):
            self.send_response(307)
            self.send_header("Location", self.path.removeprefix("/to/"))
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path == "/big":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for _ in range(10):
                self.wfile.write(b"400\r\n" + b"x" * 1024 + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
        elif self.path == "/declared":
            self.send_response(200)
            self.send_header("Content-Length", str(10 * 1024))
            self.end_headers()
            self.wfile.write(b"x" * 10 * 1024)
        else:
            self.send_response(200)
            self.send_header("Content-Length", "3")
            self.end_headers()
            self.wfile.write(b"abc")

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def servers() -> Iterator[list[tuple[str, list[str]]]]:
    """Two plain HTTP servers: (host:port, the paths each was asked)."""
    started = []
    for _ in range(2):
        asked: list[str] = []
        handler = type("Handler", (_Handler,), {"asked": asked})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        started.append((server, f"127.0.0.1:{server.server_address[1]}", asked))
    yield [(host, asked) for _, host, asked in started]
    for server, _, _ in started:
        server.shutdown()
        server.server_close()


def bounded(allowed: Collection[str], max_bytes: int = 4096) -> Any:
    from skyhook_operator.kube import oci  # noqa: PLC0415 - ORAS loads on first use

    return oci._BoundedRequests(requests.Session().request, allowed, max_bytes)


def test_a_response_is_read_in_chunks_up_to_the_cap(
    servers: list[tuple[str, list[str]]],
) -> None:
    from skyhook_operator.kube.oci import RegistryError  # noqa: PLC0415

    (host, _), _ = servers
    request = bounded({host})
    assert request("GET", f"http://{host}/small").content == b"abc"
    for path in ("big", "declared"):
        with pytest.raises(RegistryError) as refused:
            request("GET", f"http://{host}/{path}")
        assert str(refused.value) == (
            f"http://{host}/{path}: the response is larger than 4096 bytes"
        )
    assert bounded({host}, max_bytes=10 * 1024)("GET", f"http://{host}/big").content == (
        b"x" * 10 * 1024
    )


def test_a_redirect_is_followed_only_to_an_allowed_host(
    servers: list[tuple[str, list[str]]],
) -> None:
    from skyhook_operator.kube.oci import RegistryError  # noqa: PLC0415

    (first, _), (second, asked_second) = servers
    same_host = f"http://{first}/to//small"
    assert bounded({first})("GET", same_host).content == b"abc"
    elsewhere = f"http://{first}/to/http://{second}/small"
    with pytest.raises(RegistryError) as refused:
        bounded({first})("GET", elsewhere)
    assert str(refused.value) == f"{first} redirected to {second}, which is not an allowed registry"
    assert asked_second == []
    assert bounded({first, second})("GET", elsewhere).content == b"abc"
    assert asked_second == ["/small"]
