"""A list+watch of one kind, kept as an index of views: every kind the operator reads.

Skyhooks, DeploymentPolicies, nodes, pods bound to a node and our ConfigMaps each get one. None
needs a per-object handler, only a current view, so a plain list+watch per kind does: one
paginated LIST, then one watch, each event decoded into the planner's view
(`NodeView.from_api` etc.) and tagged with its resourceVersion. `listed` is set once the first
LIST has filled the index; the operator plans and says it is ready only once every index is
(runtime.py). ConfigMaps get one in the operator's namespace only, so a namespaced Role is
enough for them. (kopf's indexes did this for Skyhooks and policies until it went: its
per-object state made start-up take minutes at thousands of nodes, ARCHITECTURE.md.)

The index maps (namespace, name) to the object's `Versioned` view, and every change is
reported by key to whoever `observe`s it (the store, which merges again only those keys). The
watch is a task on the event loop, so a snapshot taken on the loop never sees the index
half-updated. A watch that ends is resumed from the last
resourceVersion; one that expired (410 Gone) lists again at once; one that failed lists again,
as does a first LIST that failed (the apiserver not reachable yet, a CRD not installed), after
a pause that doubles with each failure in a row, from 1 s to 8 s. A failure is logged when it
starts and once a minute while it lasts; a kind not served is named with its CRD.

`until_gone` lets a caller wait for an object to leave the index (a drain waiting for an
evicted pod) without asking the apiserver.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any, Generic

from skyhook_operator.kube.client import ApiError, AsyncKube, Json
from skyhook_operator.store import Key, Versioned, View, versioned

log = logging.getLogger(__name__)

_WATCH_SECONDS = 300
_RETRY_SECONDS = 1.0  # the first pause after a failed LIST or watch; doubled up to:
_RETRY_UP_TO = 8.0
_SAY_AGAIN_SECONDS = 60.0  # a failure that lasts is logged again this often
_PAGE = 100  # objects per LIST page: bounded memory and apiserver work per request


class WatchedIndex(Generic[View]):
    """Objects at `path` (a collection: all nodes, all pods, one namespace's ConfigMaps)
    matching `selector` (a fieldSelector) that `keep` accepts, decoded by `decode`."""

    def __init__(
        self,
        kube: AsyncKube,
        path: str,
        *,
        decode: Callable[[Mapping[str, Any]], View],
        on_change: Callable[[], None],
        keep: Callable[[Mapping[str, Any]], bool] = lambda _: True,
        selector: str = "",
    ) -> None:
        self._kube = kube
        self._path = path
        self._selector = {"fieldSelector": selector} if selector else {}
        self._decode = decode
        self._keep = keep
        self._on_change = on_change
        self._task: asyncio.Task[None] | None = None
        self._version = ""
        self._gone_waiters: dict[Key, list[tuple[str, asyncio.Future[None]]]] = {}
        self._observers: list[Callable[[Key | None], None]] = []
        self.index: dict[Key, Versioned[View]] = {}
        self.listed = asyncio.Event()  # the first LIST has filled the index
        self._problem = ""  # the failure last logged, and when (the loop's clock)
        self._problem_said = 0.0

    def run(self) -> None:
        """List, then watch, in a task; `listed` is set once the index is full."""
        self._task = asyncio.create_task(self._watch_forever(), name=f"watch {self._path}")

    async def start(self) -> None:
        """`run`, and return once the index is full (tools and tests)."""
        self.run()
        await self.listed.wait()

    def observe(self, changed: Callable[[Key | None], None]) -> None:
        """Call `changed` with each key the index changes, and with None when a listing
        refills it."""
        self._observers.append(changed)

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def until_gone(self, key: Key, uid: str, timeout: float) -> None:
        """Return once the object `key` with `uid` is not in the index (deleted, or replaced
        by another of the same name); TimeoutError after `timeout` seconds."""
        if self.uid(key) != uid:
            return
        gone: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters = self._gone_waiters.setdefault(key, [])
        waiters.append((uid, gone))
        try:
            await asyncio.wait_for(gone, timeout)
        finally:
            if (uid, gone) in waiters:
                waiters.remove((uid, gone))
            if not waiters:
                self._gone_waiters.pop(key, None)

    def uid(self, key: Key) -> str | None:
        """The uid of the object `key` as the index holds it; None if it holds none."""
        entry = self.index.get(key)
        return entry.uid if entry else None

    def _replace(self, entries: list[Versioned[View]], version: str) -> None:
        self.index.clear()  # the same dict: the store holds it
        self.index.update((entry.key, entry) for entry in entries)
        self._version = version
        self.listed.set()
        for changed in self._observers:
            changed(None)
        for key in list(self._gone_waiters):
            self._wake_gone(key)
        self._on_change()

    def _apply(self, kind: str, obj: Json) -> None:
        entry = versioned(obj, self._decode)
        if kind == "DELETED" or not self._keep(obj):
            if self.index.pop(entry.key, None) is None:
                return
        else:
            self.index[entry.key] = entry
        for changed in self._observers:
            changed(entry.key)
        if entry.key in self._gone_waiters:
            self._wake_gone(entry.key)
        self._on_change()

    def _wake_gone(self, key: Key) -> None:
        current = self.uid(key)
        for uid, gone in self._gone_waiters.get(key, []):
            if uid != current and not gone.done():
                gone.set_result(None)

    async def _list(self) -> tuple[list[Versioned[View]], str]:
        """Every matching object, decoded page by page (a fleet's raw objects are never all
        held at once: the operator's peak memory), and the listing's resourceVersion. The
        pages of one listing are one consistent snapshot."""
        entries: list[Versioned[View]] = []
        query: dict[str, str] = {**self._selector, "limit": str(_PAGE)}
        while True:
            page = await self._kube.request("GET", self._path, query=query)
            entries += [
                versioned(o, self._decode) for o in page.get("items") or [] if self._keep(o)
            ]
            meta = page.get("metadata") or {}
            if not meta.get("continue"):
                return entries, str(meta["resourceVersion"])
            query = {**query, "continue": meta["continue"]}
            del page  # not held while the next page is read

    async def _watch_forever(self) -> None:
        version = ""
        failures = 0  # in a row: the pause before the next try doubles with each
        while True:
            try:
                if not version:
                    self._replace(*await self._list())
                    version = self._version
                    if failures:
                        log.info("%s listed again after %d failed tries", self._path, failures)
                    failures = 0
                    self._problem = ""
                version = await self._watch_once(version)
                continue
            except ApiError as error:
                version = ""
                if error.status == 410:  # the watch expired: list again at once
                    continue
                self._say(self._describe(error))
            except (OSError, ValueError, KeyError) as error:  # a dropped connection, a restart
                version = ""
                self._say(self._describe(error))
            await asyncio.sleep(min(_RETRY_SECONDS * 2**failures, _RETRY_UP_TO))
            failures += 1

    def _describe(self, error: Exception) -> str:
        not_served = isinstance(error, ApiError) and error.status == 404
        if not not_served or not self._path.startswith("/apis/"):
            return f"watch of {self._path} failed, listing again: {error}"
        # /apis/<group>/<version>[/namespaces/<namespace>]/<plural>: a kind not served.
        parts = self._path.split("/")
        resource = f"{parts[-1]}.{parts[2]}"
        return (
            f"{resource} is not served ({self._path} answers 404): is its "
            f"CustomResourceDefinition installed? Not ready until it lists; trying again "
            f"every {_RETRY_UP_TO:.0f} s"
        )

    def _say(self, problem: str) -> None:
        """A warning for a new problem, and again once a minute while it lasts."""
        now = asyncio.get_running_loop().time()
        if problem != self._problem or now - self._problem_said >= _SAY_AGAIN_SECONDS:
            log.warning("%s", problem)
            self._problem, self._problem_said = problem, now
        else:
            log.debug("%s", problem)

    async def _watch_once(self, version: str) -> str:
        """Follow one watch request; returns the resourceVersion to resume from."""
        query = {
            **self._selector,
            "watch": "1",
            "resourceVersion": version,
            "timeoutSeconds": str(_WATCH_SECONDS),
            "allowWatchBookmarks": "true",
        }
        events = self._kube.stream(self._path, query, read_timeout=_WATCH_SECONDS + 30)
        async for kind, obj in events:
            if kind == "ERROR":
                raise ApiError(int(obj.get("code", 500)), str(obj.get("message")), "WATCH")
            version = str(obj.get("metadata", {}).get("resourceVersion") or version)
            if kind != "BOOKMARK":
                self._apply(kind, obj)
        return version
