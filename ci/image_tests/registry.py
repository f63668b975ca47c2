"""Read what a build pushed, over the registry's HTTP API (OCI distribution spec), stdlib only."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import urllib.request
from dataclasses import dataclass
from typing import Any

INDEX_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
MANIFEST_TYPES = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)


@dataclass(frozen=True)
class Registry:
    address: str  # host:port, plain HTTP

    def _get(self, path: str, accept: tuple[str, ...] = ()) -> tuple[bytes, str]:
        request = urllib.request.Request(f"http://{self.address}/v2/{path}")
        if accept:
            request.add_header("Accept", ", ".join(accept))
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.read(), response.headers.get("Content-Type", "")

    def manifest(self, repository: str, reference: str) -> tuple[dict[str, Any], str]:
        """The manifest or index `reference` (a tag or digest) names, and its media type."""
        body, media_type = self._get(
            f"{repository}/manifests/{reference}", INDEX_TYPES + MANIFEST_TYPES
        )
        return json.loads(body), media_type

    def digest(self, repository: str, tag: str) -> str:
        """The digest `tag` names: the sha256 of the manifest or index bytes as served."""
        body, _ = self._get(f"{repository}/manifests/{tag}", INDEX_TYPES + MANIFEST_TYPES)
        return f"sha256:{hashlib.sha256(body).hexdigest()}"

    def blob(self, repository: str, digest: str) -> bytes:
        return self._get(f"{repository}/blobs/{digest}")[0]

    def platforms(self, repository: str, tag: str) -> dict[str, dict[str, Any]]:
        """`os/arch` -> that platform's image manifest, from the index `tag` names.

        Attestation manifests (platform unknown/unknown, which buildx adds) are left out.
        """
        index, media_type = self.manifest(repository, tag)
        assert media_type in INDEX_TYPES, f"{repository}:{tag} is a {media_type}, not an index"
        found = {}
        for entry in index["manifests"]:
            platform = entry.get("platform", {})
            name = f"{platform.get('os')}/{platform.get('architecture')}"
            if name != "unknown/unknown":
                found[name] = self.manifest(repository, entry["digest"])[0]
        return found

    def layer_members(self, repository: str, layer: dict[str, Any]) -> dict[str, tarfile.TarInfo]:
        return {member.name: member for member in self._layer(repository, layer).getmembers()}

    def layer_file(self, repository: str, layer: dict[str, Any], name: str) -> bytes:
        handle = self._layer(repository, layer).extractfile(name)
        assert handle is not None, f"{name} is not a regular file in {layer['digest']}"
        return handle.read()

    def _layer(self, repository: str, layer: dict[str, Any]) -> tarfile.TarFile:
        # r:* reads gzip and plain tar alike; zstd layers are not what buildx pushes by default.
        return tarfile.open(fileobj=io.BytesIO(self.blob(repository, layer["digest"])), mode="r:*")
