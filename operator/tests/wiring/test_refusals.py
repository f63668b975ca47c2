"""A write the apiserver refuses as invalid (422): recorded for the planner, said once in a
Warning Event, held back (with the rest of its node's lane) while the Skyhook's spec stays the
same, tried again once it changes, and forgotten once a write of the object goes through."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from skyhook_operator.kube.client import ApiError, AsyncKube
from skyhook_operator.kube.writer import Writer
from skyhook_operator.store import ClusterStore
from skyhook_planner.model.actions import CreatePod, EmitEvent, PatchNode, Plan
from skyhook_planner.model.snapshot import WriteRefusal


class RefusingClient:
    """Refuses pod creations with a 422 while `refusing`; answers everything else."""

    node_path = staticmethod(AsyncKube.node_path)
    namespaced_path = staticmethod(AsyncKube.namespaced_path)
    skyhook_path = staticmethod(AsyncKube.skyhook_path)

    def __init__(self) -> None:
        self.refusing = True
        self.sent: list[tuple[str, str]] = []

    async def request(self, method: str, path: str, body: Any = None, *_: Any, **__: Any) -> Any:
        self.sent.append((method, path))
        if self.refusing and path.endswith("/pods") and method == "POST":
            raise ApiError(
                422,
                'Pod "p" is invalid: metadata.labels: Invalid value: "x": too long',
                method,
                path,
                ("metadata.labels",),
            )
        return {"metadata": {"name": "x", "namespace": "skyhook", "resourceVersion": "7"}}


POD = CreatePod(
    {
        "metadata": {
            "name": "p",
            "namespace": "skyhook",
            "labels": {"skyhook.nvidia.com/name": "s"},
        },
        "spec": {"nodeName": "n1"},
    }
)
AFTER = PatchNode("n1", annotations={"skyhook.nvidia.com/status_s": "in_progress"})
PLAN = Plan((POD, AFTER))


def test_a_refused_write_is_reported_once_and_held_until_the_spec_changes() -> None:
    asyncio.run(_refused_write())


async def _refused_write() -> None:
    client = RefusingClient()
    kube = cast(AsyncKube, client)
    store = ClusterStore()
    writer = Writer(kube, store, lambda action: None)
    events: list[EmitEvent] = []
    writer.emit_event = events.append  # type: ignore[method-assign]

    await writer.apply(writer.without_held(PLAN, {"s": 3}))
    await writer.drain()
    assert store.refusals.current(["s"]) == (
        WriteRefusal(
            "s",
            "Pod",
            "skyhook",
            "p",
            'Pod "p" is invalid: metadata.labels: Invalid value: "x": too long',
            3,
        ),
    )
    (event,) = events
    assert (event.kind, event.name, event.reason, event.type) == (
        "Skyhook",
        "s",
        "WriteRefused",
        "Warning",
    )
    assert event.message.startswith("Pod skyhook/p: the apiserver refused metadata.labels")

    # The same spec: the pod and what its lane holds after it are not sent again.
    assert writer.without_held(PLAN, {"s": 3}).actions == ()
    # A new spec: tried again; once it goes through, the refusal is forgotten.
    client.refusing = False
    sent = len(client.sent)
    await writer.apply(writer.without_held(PLAN, {"s": 4}))
    await writer.drain()
    assert ("POST", "/api/v1/namespaces/skyhook/pods") in client.sent[sent:]
    assert store.refusals.current(["s"]) == ()
    assert len(events) == 1
    assert await writer.close(5.0)
