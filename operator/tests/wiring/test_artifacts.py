"""The artifact resolver before each pass: on the loop, leaving it only for a registry fetch."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from skyhook_operator.kube import artifacts
from skyhook_operator.kube.artifacts import ArtifactFetcher, ArtifactResolver
from skyhook_planner.model.imagecompat import Artifact, parse
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

    def fetch_oci(self, reference: str) -> Artifact:
        self.threads.append(threading.current_thread())
        return parse(ARTIFACT)


@pytest.fixture
def crossings(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What the artifacts module handed to a worker thread."""
    handed: list[str] = []
    to_thread = asyncio.to_thread

    async def counted(fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        handed.append(getattr(fn, "__name__", repr(fn)))
        return await to_thread(fn, *args, **kwargs)

    monkeypatch.setattr(artifacts.asyncio, "to_thread", counted)
    return handed


def resolver(registry: Registry, refresh: float = 60.0) -> ArtifactResolver:
    fetcher = ArtifactFetcher(None, "skyhook", refresh)
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
