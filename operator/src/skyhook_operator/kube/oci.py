"""An OCI registry, reached with ORAS (oras-py, on `requests`). Imported when the first OCI
artifact is fetched, not with the operator: ORAS and what it loads are about 10 MiB of
resident memory that a fleet naming no OCI artifact never needs.

Every request ORAS makes (manifest, blob, token) goes through `_BoundedRequests`: a response
body is read in chunks and refused past `max_bytes`, and a redirect is followed only to a host
on the allowlist (registries commonly send blob downloads to a storage host of their own,
which must then be listed too).

Blocking: the caller runs it in a worker thread.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any
from urllib.parse import urljoin, urlsplit

import oras.provider
import requests
from oras.auth import AuthenticationException

MANIFEST_MEDIA_TYPES = ["application/vnd.oci.image.manifest.v1+json"]
REQUEST_TIMEOUT_S = 10.0
MAX_REDIRECTS = 5
_CHUNK_BYTES = 64 * 1024


class RegistryError(Exception):
    """The registry could not be reached or refused; the message says why in one line."""


class NotAllowed(RegistryError):
    """A redirect to a host not on the allowlist (not followed)."""


class TooLarge(RegistryError):
    """A response larger than the limit (not read past it)."""


class _BoundedRequests:
    """Stands in for the session's `request`: one attempt with a timeout, redirects followed
    only to `allowed` hosts, and the body read (in chunks) into the response only while it
    stays within `max_bytes`."""

    def __init__(
        self, send: Callable[..., requests.Response], allowed: Collection[str], max_bytes: int
    ) -> None:
        self._send = send
        self._allowed = allowed
        self._max_bytes = max_bytes

    def __call__(self, method: str, url: str, **kwargs: Any) -> requests.Response:
        kwargs.update(timeout=REQUEST_TIMEOUT_S, stream=True, allow_redirects=False)
        for _ in range(MAX_REDIRECTS + 1):
            response = self._send(method, url, **kwargs)
            if not response.is_redirect:
                self._read(response, url)
                return response
            response.close()
            target = urljoin(url, response.headers["Location"])
            host = urlsplit(target).netloc
            if host not in self._allowed:
                raise NotAllowed(
                    f"{urlsplit(url).netloc} redirected to {host}, which is not an allowed registry"
                )
            if host != urlsplit(url).netloc:  # the registry's credentials stay with it
                headers = dict(kwargs.get("headers") or {})
                headers.pop("Authorization", None)
                kwargs["headers"] = headers
            url = target
        raise RegistryError(f"{url}: more than {MAX_REDIRECTS} redirects")

    def _read(self, response: requests.Response, url: str) -> None:
        limit = self._max_bytes
        declared = response.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > limit:
            response.close()
            raise TooLarge(_too_large(url, limit))
        body = bytearray()
        for chunk in response.iter_content(_CHUNK_BYTES):
            body += chunk
            if len(body) > limit:
                response.close()
                raise TooLarge(_too_large(url, limit))
        # What `.content` and `.json()` read from now on: the body is consumed.
        response._content = bytes(body)


def _too_large(url: str, limit: int) -> str:
    return f"{url}: the response is larger than {limit} bytes"


class _Registry(oras.provider.Registry):  # type: ignore[misc]
    """ORAS without its in-request retries: they sleep for minutes on an unreachable registry,
    which would stall a reconcile pass. The next refresh is the retry."""

    def __init__(self, insecure: bool, allowed: Collection[str], max_bytes: int) -> None:
        super().__init__(insecure=insecure)
        # The auth backend shares the session: token requests are bounded too.
        self.session.request = _BoundedRequests(self.session.request, allowed, max_bytes)

    def do_request(self, *args: Any, **kwargs: Any) -> requests.Response:
        single_attempt: Callable[..., requests.Response] = (
            oras.provider.Registry.do_request.__wrapped__
        )
        return single_attempt(self, *args, **kwargs)


class Manifest:
    """A reference's image manifest (`body`), and its blobs on request. Requests may be
    redirected only to `allowed` hosts; a response over `max_bytes` is refused."""

    def __init__(
        self, reference: str, insecure: bool, allowed: Collection[str], max_bytes: int
    ) -> None:
        self._registry = _Registry(insecure, allowed, max_bytes)
        try:
            self._container = self._registry.get_container(reference)
            self.body: dict[str, Any] = self._registry.get_manifest(
                self._container, allowed_media_type=MANIFEST_MEDIA_TYPES
            )
        except (requests.RequestException, ValueError, AuthenticationException) as err:
            raise RegistryError(_short(err)) from None

    def blob(self, digest: str) -> bytes:
        try:
            response = self._registry.get_blob(self._container, digest)
            response.raise_for_status()
        except requests.RequestException as err:
            raise RegistryError(_short(err)) from None
        return bytes(response.content)


def _short(err: BaseException) -> str:
    return str(err).splitlines()[0][:300] if str(err) else type(err).__name__
