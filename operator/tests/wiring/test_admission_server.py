"""The admission webhooks over HTTPS, as the apiserver calls them: AdmissionReview v1 in and
out, a refusal's message and code, a mutation as a base64 JSONPatch, large reviews, and a
changed certificate served to new connections. The decisions themselves are tested in
unit/test_admission.py; the whole path through a real apiserver in
integration/test_admission.py."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import aiohttp
import jsonpatch

from skyhook_operator.admission import Admission, serve
from skyhook_operator.kube import webhooks
from skyhook_operator.kube.artifacts import ArtifactFetcher
from skyhook_operator.kube.client import AsyncKube
from skyhook_sandbox.processes import free_port

VALIDATE = "/validate-skyhook-nvidia-com-v1alpha1-skyhook"
MUTATE = "/mutate-skyhook-nvidia-com-v1alpha1-skyhook"
PACKAGE = {"version": "1.0.0", "image": "ghcr.io/nvidia/skyhook-packages/shellscript"}


@dataclass
class FakeIndex:
    index: dict[tuple[str, str], list[Any]] = field(default_factory=dict)
    listed: asyncio.Event = field(default_factory=asyncio.Event)


def reviews() -> Admission:
    """The real handlers; none of these reviews reaches the apiserver or a registry."""
    indexes = {"policy_index": FakeIndex(), "node_index": FakeIndex()}
    return Admission(cast(AsyncKube, None), indexes, cast(ArtifactFetcher, None))


def review(obj: dict[str, Any], uid: str = "uid-1") -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": uid, "operation": "CREATE", "object": obj, "oldObject": None},
    }


def skyhook(**package: Any) -> dict[str, Any]:
    return {"metadata": {"name": "s"}, "spec": {"packages": {"foo": {**PACKAGE, **package}}}}


async def post(address: str, path: str, body: bytes) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"https://{address}{path}", data=body, ssl=False) as answer,
    ):
        text = await answer.text()
        return answer.status, json.loads(text) if answer.status == 200 else text


def run_served(tmp_path: Path, scenario: Any, check_interval: float = 5.0) -> None:
    webhooks.write_files(tmp_path, webhooks.generate(["127.0.0.1"], datetime.now(UTC)))
    address = f"127.0.0.1:{free_port()}"

    async def main() -> None:
        endpoints = await serve(reviews(), address, str(tmp_path), check_interval)
        try:
            await scenario(address)
        finally:
            await endpoints.stop()

    asyncio.run(main())


def test_a_refusal_carries_the_message_the_code_and_the_uid(tmp_path: Path) -> None:
    async def scenario(address: str) -> None:
        bad = skyhook(version="one")
        status, answer = await post(address, VALIDATE, json.dumps(review(bad, "u-7")).encode())
        assert status == 200
        assert (answer["apiVersion"], answer["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
        response = answer["response"]
        assert (response["uid"], response["allowed"]) == ("u-7", False)
        assert response["status"]["code"] == 403
        assert response["status"]["message"].startswith("spec.packages.foo.version: 'one'")
        assert "patch" not in response

    run_served(tmp_path, scenario)


def test_an_admitted_object_gets_its_warnings(tmp_path: Path) -> None:
    async def scenario(address: str) -> None:
        upstream = skyhook(version="v1.2")  # upstream's spelling: admitted, with a warning
        _, answer = await post(address, VALIDATE, json.dumps(review(upstream)).encode())
        response = answer["response"]
        assert response["allowed"] is True and "status" not in response
        assert [w.split(":")[0] for w in response["warnings"]] == ["spec.packages.foo.version"]

    run_served(tmp_path, scenario)


def test_a_mutation_is_a_base64_json_patch_against_the_object_sent(tmp_path: Path) -> None:
    async def scenario(address: str) -> None:
        sent = skyhook(image="ghcr.io/nvidia/skyhook-packages/shellscript:1.0.0")
        _, answer = await post(address, MUTATE, json.dumps(review(sent)).encode())
        response = answer["response"]
        assert response["allowed"] is True and response["patchType"] == "JSONPatch"
        operations = json.loads(base64.b64decode(response["patch"]))
        stored = jsonpatch.apply_patch(sent, operations)
        assert stored["spec"]["packages"]["foo"] == {**PACKAGE, "name": "foo"}
        # Already in the stored form: nothing to patch.
        _, again = await post(address, MUTATE, json.dumps(review(stored)).encode())
        assert "patch" not in again["response"] and "patchType" not in again["response"]

    run_served(tmp_path, scenario)


def test_a_large_review_is_read_and_a_malformed_one_is_a_bad_request(tmp_path: Path) -> None:
    async def scenario(address: str) -> None:
        large = skyhook()
        large["metadata"]["annotations"] = {"big": "x" * (3 * 1024 * 1024)}
        status, answer = await post(address, VALIDATE, json.dumps(review(large)).encode())
        assert status == 200 and answer["response"]["allowed"] is True
        status, _ = await post(address, VALIDATE, b"{not json")
        assert status == 400
        status, _ = await post(address, "/validate-something-else", b"{}")
        assert status == 404

    run_served(tmp_path, scenario)


def test_a_changed_certificate_is_served_to_new_connections(tmp_path: Path) -> None:
    async def scenario(address: str) -> None:
        host, port = address.split(":")
        served = await asyncio.to_thread(ssl.get_server_certificate, (host, int(port)))
        assert served.encode() == (tmp_path / "tls.crt").read_bytes()
        renewed = webhooks.generate(["127.0.0.1", "renewed.example"], datetime.now(UTC))
        webhooks.write_files(tmp_path, renewed)
        deadline = time.monotonic() + 5
        while served.encode() != renewed.cert and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            served = await asyncio.to_thread(ssl.get_server_certificate, (host, int(port)))
        assert served.encode() == renewed.cert, "the server still presents the old certificate"

    run_served(tmp_path, scenario, check_interval=0.1)
