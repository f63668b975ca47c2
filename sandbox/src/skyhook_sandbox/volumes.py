"""A pod's volumes as local directories: hostPath under the node's host root, emptyDir as a
per-pod dir, configMap / secret / downwardAPI / projected rendered into files."""

from __future__ import annotations

import asyncio
import base64
import os
import shutil
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skyhook_sandbox import simkernel
from skyhook_sandbox.container import Mount
from skyhook_sandbox.podenv import field_value

JsonDict = dict[str, Any]
FetchObject = Callable[[str, str], Awaitable["JsonDict | None"]]  # (kind, name) -> object
RequestToken = Callable[[str, int, str], Awaitable[str]]  # (service account, seconds, audience)


class VolumeError(Exception):
    """A volume cannot be set up yet (kubelet: FailedMount); retried."""


@dataclass(frozen=True)
class PreparedVolume:
    path: Path
    host_root: bool = False


def _write(directory: Path, relative: str, content: bytes, mode: int) -> None:
    if relative.startswith("/") or ".." in Path(relative).parts:
        raise VolumeError(f"item path {relative!r} must be relative and stay inside the volume")
    target = directory / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(content)
    target.chmod(mode)


def _entries(obj: JsonDict, secret: bool) -> dict[str, bytes]:
    data = obj.get("data") or {}
    if secret:
        return {k: base64.b64decode(v) for k, v in data.items()}
    entries = {k: v.encode() for k, v in data.items()}
    entries.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
    return entries


def _render_keys(
    directory: Path, entries: dict[str, bytes], items: list[JsonDict] | None, mode: int, what: str
) -> None:
    if items:
        for item in items:
            if item["key"] not in entries:
                raise VolumeError(f'{what}: no key "{item["key"]}"')
            _write(directory, item["path"], entries[item["key"]], item.get("mode", mode))
    else:
        for key, value in entries.items():
            _write(directory, key, value, mode)


class VolumeBuilder:
    def __init__(
        self,
        pod: JsonDict,
        pod_dir: Path,
        host_root: Path,
        fetch: FetchObject,
        request_token: RequestToken,
    ) -> None:
        self.pod = pod
        self.pod_dir = pod_dir
        self.host_root = host_root
        self.fetch = fetch
        self.request_token = request_token

    async def prepare(self) -> dict[str, PreparedVolume]:
        """Every volume at once (each has its own directory), as a kubelet's volume manager
        sets them up in parallel: a pod waits for its slowest volume, not for their sum."""
        volumes = self.pod["spec"].get("volumes") or []
        results = await asyncio.gather(
            *(self._prepare_one(volume) for volume in volumes), return_exceptions=True
        )
        prepared = {}
        for volume, result in zip(volumes, results, strict=True):
            if isinstance(result, BaseException):
                raise result
            prepared[volume["name"]] = result
        return prepared

    def _fresh_dir(self, name: str) -> Path:
        directory = self.pod_dir / "volumes" / name
        if directory.exists():
            shutil.rmtree(directory)
        directory.mkdir(parents=True)
        return directory

    async def _prepare_one(self, volume: JsonDict) -> PreparedVolume:
        name = volume["name"]
        if "hostPath" in volume:
            return self._host_path(name, volume["hostPath"])
        if "emptyDir" in volume:
            directory = self.pod_dir / "volumes" / name
            directory.mkdir(parents=True, exist_ok=True)
            directory.chmod(0o777)
            return PreparedVolume(directory)
        if "configMap" in volume or "secret" in volume:
            secret = "secret" in volume
            source = volume["secret" if secret else "configMap"]
            object_name = source.get("secretName" if secret else "name", "")
            directory = self._fresh_dir(name)
            await self._render_object(
                directory, source, object_name, secret, source.get("defaultMode", 0o644)
            )
            return PreparedVolume(directory)
        if "downwardAPI" in volume:
            directory = self._fresh_dir(name)
            self._render_downward(directory, volume["downwardAPI"].get("items") or [],
                                  volume["downwardAPI"].get("defaultMode", 0o644))  # fmt: skip
            return PreparedVolume(directory)
        if "projected" in volume:
            directory = self._fresh_dir(name)
            await self._render_projected(directory, volume["projected"])
            return PreparedVolume(directory)
        kinds = sorted(set(volume) - {"name"})
        raise VolumeError(f"volume {name}: type {', '.join(kinds)} is not supported by the sandbox")

    def _host_path(self, name: str, spec: JsonDict) -> PreparedVolume:
        relative = spec["path"].strip("/")
        target = self.host_root / relative if relative else self.host_root
        kind = spec.get("type", "")
        if kind == "DirectoryOrCreate":
            target.mkdir(parents=True, exist_ok=True)
        elif kind == "FileOrCreate" and not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.touch()
        elif kind in ("Directory", "File") and not target.exists():
            raise VolumeError(f"volume {name}: hostPath {spec['path']} does not exist on the node")
        return PreparedVolume(target, host_root=not relative)

    async def _render_object(
        self, directory: Path, source: JsonDict, object_name: str, secret: bool, mode: int
    ) -> None:
        kind = "secret" if secret else "configmap"
        obj = await self.fetch(kind, object_name)
        if obj is None:
            if source.get("optional"):
                return
            raise VolumeError(f'{kind} "{object_name}" not found')
        _render_keys(
            directory, _entries(obj, secret), source.get("items"), mode, f'{kind} "{object_name}"'
        )

    def _render_downward(self, directory: Path, items: list[JsonDict], mode: int) -> None:
        for item in items:
            if "fieldRef" not in item:
                raise VolumeError(
                    f"downwardAPI item {item.get('path')}: only fieldRef is supported"
                )
            value = field_value(self.pod, item["fieldRef"]["fieldPath"])
            _write(directory, item["path"], value.encode(), item.get("mode", mode))

    async def _render_projected(self, directory: Path, spec: JsonDict) -> None:
        mode = spec.get("defaultMode", 0o644)
        for source in spec.get("sources") or []:
            if "serviceAccountToken" in source:
                token_spec = source["serviceAccountToken"]
                token = await self.request_token(
                    self.pod["spec"].get("serviceAccountName") or "default",
                    int(token_spec.get("expirationSeconds", 3600)),
                    token_spec.get("audience", ""),
                )
                _write(directory, token_spec["path"], token.encode(), mode)
            elif "configMap" in source or "secret" in source:
                secret = "secret" in source
                ref = source["secret" if secret else "configMap"]
                await self._render_object(directory, ref, ref.get("name", ""), secret, mode)
            elif "downwardAPI" in source:
                self._render_downward(directory, source["downwardAPI"].get("items") or [], mode)
            else:
                raise VolumeError(
                    f"projected source {sorted(source)} is not supported by the sandbox"
                )


def mounts_for(container: JsonDict, volumes: dict[str, PreparedVolume]) -> list[Mount]:
    mounts = []
    for mount in container.get("volumeMounts") or []:
        name = mount["name"]
        if name not in volumes:
            raise VolumeError(f"volumeMounts {name}: no volume of that name in the pod")
        volume = volumes[name]
        source = volume.path
        sub_path = mount.get("subPath", "")
        if sub_path:
            source = source / sub_path
            if not source.exists():
                source.mkdir(parents=True)
        mounts.append(
            Mount(
                source=os.fspath(source),
                target=mount["mountPath"],
                read_only=bool(mount.get("readOnly")),
                host_root=volume.host_root and not sub_path,
            )
        )
        if volume.host_root and not sub_path:
            # The node's simulated /proc/sys, /proc/cmdline and unit limits over the real /proc.
            mounts.extend(simkernel.proc_mounts(source, mount["mountPath"]))
    return mounts
