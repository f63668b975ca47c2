"""A list+watch of one kind, kept as an index of views: nodes, pods and our ConfigMaps.

Why not kopf's indexes for these: kopf keeps per-object state for every object it watches and
holds each object's handlers back until every index is filled, which at thousands of nodes and
their pods made start-up take minutes and the operator's memory grow with every pod it ever
saw. These kinds need no handler, only a current view, so a plain list+watch per kind does:
one paginated LIST (the index is complete when `start` returns), then one watch, each event
decoded into the planner's view (`NodeView.from_api` etc.) and tagged with its resourceVersion.
ConfigMaps get one in the operator's namespace only, so a namespaced Role is enough for them.

The index maps (namespace, name) to a one-item list of `Versioned` views, the shape
`snapshot.index_values` reads from kopf's indexes. It is only changed on the event loop (the
blocking watch runs in a thread and hands each event over), so a snapshot taken on the loop
never sees it half-updated. A watch that ends is resumed from the last resourceVersion; one
that expired (410 Gone) or failed lists again.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Generic

from skyhook_operator.kube.client import ApiError, Json, Kube
from skyhook_operator.store import Key, Versioned, View, versioned

log = logging.getLogger(__name__)

_WATCH_SECONDS = 300
_RETRY_SECONDS = 1.0
_PAGE = 500  # objects per LIST page: bounded memory and apiserver work per request


class WatchedIndex(Generic[View]):
    """Objects at `path` (a collection: all nodes, all pods, one namespace's ConfigMaps)
    matching `selector` (a fieldSelector) that `keep` accepts, decoded by `decode`."""

    def __init__(
        self,
        kube: Kube,
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
        self._stopped = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._version = ""
        self.index: dict[Key, list[Versioned[View]]] = {}

    async def start(self) -> None:
        """List once (the index is complete when this returns), then watch in a thread."""
        self._loop = asyncio.get_running_loop()
        listing = await asyncio.to_thread(self._list)
        self._replace(listing)
        threading.Thread(
            target=self._watch_forever, name=f"watch {self._path}", daemon=True
        ).start()

    def stop(self) -> None:
        """The thread ends at its next event or watch timeout; nothing waits for it."""
        self._stopped.set()

    # --- on the event loop ----------------------------------------------------------------------

    def _replace(self, listing: Json) -> None:
        self.index.clear()
        for item in listing.get("items") or []:
            self._apply("ADDED", item)
        self._version = str(listing["metadata"]["resourceVersion"])

    def _apply(self, kind: str, obj: Json) -> None:
        entry = versioned(obj, self._decode)
        if kind == "DELETED" or not self._keep(obj):
            if self.index.pop(entry.key, None) is None:
                return
        else:
            self.index[entry.key] = [entry]
        self._on_change()

    def _relisted(self, listing: Json) -> None:
        self._replace(listing)
        self._on_change()

    # --- in the watch thread --------------------------------------------------------------------

    def _list(self) -> Json:
        """Every matching object, page by page; the pages of one listing are one consistent
        snapshot, at the resourceVersion each page carries."""
        items: list[Json] = []
        query: dict[str, str] = {**self._selector, "limit": str(_PAGE)}
        while True:
            page = self._kube.request("GET", self._path, query=query)
            items += page.get("items") or []
            meta = page.get("metadata") or {}
            if not meta.get("continue"):
                return {"items": items, "metadata": {"resourceVersion": meta["resourceVersion"]}}
            query = {**query, "continue": meta["continue"]}

    def _hand_over(self, callback: Callable[..., None], *args: Any) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(callback, *args)

    def _watch_forever(self) -> None:
        version = self._version
        while not self._stopped.is_set():
            try:
                if not version:
                    listing = self._list()
                    version = str(listing["metadata"]["resourceVersion"])
                    self._hand_over(self._relisted, listing)
                version = self._watch_once(version)
            except ApiError as error:
                version = ""
                if error.status != 410:  # 410: the watch expired, list again at once
                    log.warning("watch of %s failed, listing again: %s", self._path, error)
                    time.sleep(_RETRY_SECONDS)
            except Exception as error:  # a dropped connection or a restarting apiserver
                log.warning("watch of %s failed, listing again: %s", self._path, error)
                version = ""
                time.sleep(_RETRY_SECONDS)

    def _watch_once(self, version: str) -> str:
        """Follow one watch request; returns the resourceVersion to resume from."""
        query = {
            **self._selector,
            "watch": "1",
            "resourceVersion": version,
            "timeoutSeconds": str(_WATCH_SECONDS),
            "allowWatchBookmarks": "true",
        }
        for kind, obj in self._kube.stream(self._path, query, read_timeout=_WATCH_SECONDS + 30):
            if kind == "ERROR":
                raise ApiError(int(obj.get("code", 500)), str(obj.get("message")), "WATCH")
            version = str(obj.get("metadata", {}).get("resourceVersion") or version)
            if kind != "BOOKMARK":
                self._hand_over(self._apply, kind, obj)
            if self._stopped.is_set():
                break
        return version
