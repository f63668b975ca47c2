"""An OCI registry, reached with ORAS (oras-py, on `requests`). Imported when the first OCI
artifact is fetched, not with the operator: ORAS and what it loads are about 10 MiB of
resident memory that a fleet naming no OCI artifact never needs.

Blocking: the caller runs it in a worker thread.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import oras.provider
import requests
from oras.auth import AuthenticationException

MANIFEST_MEDIA_TYPES = ["application/vnd.oci.image.manifest.v1+json"]
REQUEST_TIMEOUT_S = 10.0


class RegistryError(Exception):
    """The registry could not be reached or refused; the message says why in one line."""


class _Registry(oras.provider.Registry):  # type: ignore[misc]
    """ORAS without its in-request retries: they sleep for minutes on an unreachable registry,
    which would stall a reconcile pass. The next refresh is the retry."""

    def __init__(self, insecure: bool) -> None:
        super().__init__(insecure=insecure)
        self.session.request = functools.partial(self.session.request, timeout=REQUEST_TIMEOUT_S)

    def do_request(self, *args: Any, **kwargs: Any) -> requests.Response:
        single_attempt: Callable[..., requests.Response] = (
            oras.provider.Registry.do_request.__wrapped__
        )
        return single_attempt(self, *args, **kwargs)


class Manifest:
    """A reference's image manifest (`body`), and its blobs on request."""

    def __init__(self, reference: str, insecure: bool) -> None:
        self._registry = _Registry(insecure=insecure)
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
