"""Who may read `/metrics`: the apiserver says, as it does for controller-runtime's secure
metrics (`filters.WithAuthenticationAndAuthorization`) and for kube-rbac-proxy.

A caller's bearer token is sent in a TokenReview (authentication.k8s.io/v1); the user it names
is then asked about in a SubjectAccessReview (authorization.k8s.io/v1) for the request's
non-resource URL and verb (`get /metrics`). No token, or one the apiserver does not accept: 401;
a user without the permission: 403; no answer from the apiserver: 500 (`ReviewFailed`). Answers are cached as controller-runtime caches them
(tokens a minute, allowed five minutes, denied 30 s), so a Prometheus scraping every 30 s costs
no API call between expiries; a failed review is never cached. Tokens are kept only as their
SHA-256. Runs on the event loop.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from skyhook_operator.kube.client import ApiError, AsyncKube

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
TOKEN_TTL = 60.0
ALLOW_TTL = 300.0
DENY_TTL = 30.0
REVIEW_TIMEOUT = 10.0  # controller-runtime's TokenAccessReviewTimeout

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class TtlCache(Generic[K, V]):
    """Values that expire `ttl` seconds after they were put; at most `size` of them (a full
    cache first drops what expired, then the oldest), so random tokens cannot grow it."""

    def __init__(self, size: int = 1024, clock: Callable[[], float] = time.monotonic) -> None:
        self._size = size
        self._clock = clock
        self._items: dict[K, tuple[float, V]] = {}

    def get(self, key: K) -> V | None:
        found = self._items.get(key)
        if found is None:
            return None
        if found[0] <= self._clock():
            del self._items[key]
            return None
        return found[1]

    def put(self, key: K, value: V, ttl: float) -> None:
        now = self._clock()
        self._items.pop(key, None)
        if len(self._items) >= self._size:
            for stale in [k for k, (expiry, _) in self._items.items() if expiry <= now]:
                del self._items[stale]
        while len(self._items) >= self._size:
            del self._items[next(iter(self._items))]  # dicts keep insertion order
        self._items[key] = (now + ttl, value)


@dataclass(frozen=True)
class User:
    """A user as a TokenReview names it, passed on unchanged to the SubjectAccessReview."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @classmethod
    def from_review(cls, user: dict[str, Any]) -> User:
        extra = user.get("extra") or {}
        return cls(
            name=str(user.get("username") or ""),
            uid=str(user.get("uid") or ""),
            groups=tuple(user.get("groups") or ()),
            extra=tuple(sorted((k, tuple(v or ())) for k, v in extra.items())),
        )


@dataclass(frozen=True)
class Verdict:
    """The HTTP answer to a request: 200 lets it through, 401 or 403 refuse it with `message`."""

    status: int
    message: str = ""

    @property
    def allowed(self) -> bool:
        return self.status == 200


class ReviewFailed(Exception):
    """The apiserver did not answer a review; the caller answers 500, as controller-runtime."""


UNAUTHORIZED = Verdict(401, "Unauthorized")


class AccessReviewer:
    """Asks the apiserver who a token is and whether they may make a request; see the module
    docstring. `kube` is an unfenced view of the client: leader election fences the
    operator's main view off writes, and every replica answers scrapes."""

    def __init__(self, kube: AsyncKube, clock: Callable[[], float] = time.monotonic) -> None:
        self.kube = kube
        # (user,), or (None,) for a token the apiserver did not accept.
        self._users: TtlCache[str, tuple[User | None]] = TtlCache(clock=clock)
        self._decisions: TtlCache[tuple[User, str, str], Verdict] = TtlCache(clock=clock)

    async def review(self, token: str, verb: str, path: str) -> Verdict:
        """The verdict on a request for `verb` `path` with `token` (empty: no token)."""
        if not token:
            return UNAUTHORIZED
        user = await self.authenticate(token)
        if user is None:
            return UNAUTHORIZED
        return await self.authorize(user, verb, path)

    async def authenticate(self, token: str) -> User | None:
        digest = hashlib.sha256(token.encode()).hexdigest()
        if (cached := self._users.get(digest)) is not None:
            return cached[0]
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        }
        status = await self._post(TOKEN_REVIEWS, body, "Authentication failed")
        user = User.from_review(status.get("user") or {}) if status.get("authenticated") else None
        self._users.put(digest, (user,), TOKEN_TTL)
        return user

    async def authorize(self, user: User, verb: str, path: str) -> Verdict:
        key = (user, verb, path)
        if (cached := self._decisions.get(key)) is not None:
            return cached
        spec: dict[str, Any] = {
            "user": user.name,
            "groups": list(user.groups),
            "nonResourceAttributes": {"path": path, "verb": verb},
        }
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = {k: list(v) for k, v in user.extra}
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": spec,
        }
        status = await self._post(
            ACCESS_REVIEWS, body, f"Authorization for user {user.name} failed"
        )
        if status.get("allowed"):
            verdict, ttl = Verdict(200), ALLOW_TTL
        else:
            verdict, ttl = Verdict(403, f"Authorization denied for user {user.name}"), DENY_TTL
        self._decisions.put(key, verdict, ttl)
        return verdict

    async def _post(self, path: str, body: dict[str, Any], failure: str) -> dict[str, Any]:
        try:
            answer = await self.kube.request("POST", path, body, timeout=REVIEW_TIMEOUT, retries=0)
        except (ApiError, OSError) as error:
            raise ReviewFailed(f"{failure}: {error}") from error
        return dict(answer.get("status") or {})
