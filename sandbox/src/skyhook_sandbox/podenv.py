"""Pure kubelet rules for a container's environment and command line.

`$(VAR)` expansion follows the kubelet: `$$` escapes a dollar, `$(NAME)` becomes the value of
an already-defined variable, and an undefined reference is left as written.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Mapping
from typing import Any

Lookup = Callable[[str, str, str], "str | None"]  # (kind, object name, key) -> value or None

_FIELD_LABEL = re.compile(r"metadata\.(labels|annotations)\['(.+)'\]")


class ContainerConfigError(Exception):
    """The container cannot be created from its spec (kubelet: CreateContainerConfigError)."""


def expand(text: str, variables: Mapping[str, str]) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] == "$" and i + 1 < len(text):
            following = text[i + 1]
            if following == "$":
                out.append("$")
                i += 2
                continue
            if following == "(":
                end = text.find(")", i + 2)
                if end != -1:
                    name = text[i + 2 : end]
                    out.append(variables[name] if name in variables else text[i : end + 1])
                    i = end + 1
                    continue
        out.append(text[i])
        i += 1
    return "".join(out)


def field_value(pod: Mapping[str, Any], path: str) -> str:
    meta = pod.get("metadata", {})
    spec = pod.get("spec", {})
    status = pod.get("status", {})
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.hostIP": status.get("hostIP"),
        "status.podIP": status.get("podIP"),
    }
    if path in simple:
        return str(simple[path] or "")
    if path in ("metadata.labels", "metadata.annotations"):
        items = meta.get(path.split(".")[1]) or {}
        return "\n".join(f'{k}="{v}"' for k, v in sorted(items.items()))
    match = _FIELD_LABEL.fullmatch(path)
    if match:
        return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
    raise ContainerConfigError(f"env fieldRef.fieldPath {path!r} is not supported")


def _from_source(source: Mapping[str, Any], kind: str, lookup: Lookup, var: str) -> str | None:
    ref = source.get("configMapKeyRef" if kind == "configmap" else "secretKeyRef") or {}
    name, key = ref.get("name", ""), ref.get("key", "")
    value = lookup(kind, name, key)
    if value is None:
        if ref.get("optional"):
            return None
        raise ContainerConfigError(f'env {var}: {kind} "{name}" has no key "{key}"')
    return value


def container_env(
    container: Mapping[str, Any],
    pod: Mapping[str, Any],
    lookup: Lookup,
    list_keys: Callable[[str, str], dict[str, str] | None],
) -> dict[str, str]:
    """The container's variables in kubelet order: envFrom first, then env (later wins)."""
    result: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        for kind, field in (("configmap", "configMapRef"), ("secret", "secretRef")):
            ref = source.get(field)
            if ref is None:
                continue
            values = list_keys(kind, ref.get("name", ""))
            if values is None:
                if ref.get("optional"):
                    continue
                raise ContainerConfigError(f'envFrom: {kind} "{ref.get("name")}" not found')
            result.update({prefix + k: v for k, v in values.items()})
    for item in container.get("env") or []:
        name = item["name"]
        if "valueFrom" not in item:
            result[name] = expand(item.get("value", ""), result)
            continue
        source = item["valueFrom"]
        if "fieldRef" in source:
            result[name] = field_value(pod, source["fieldRef"]["fieldPath"])
        elif "configMapKeyRef" in source or "secretKeyRef" in source:
            kind = "configmap" if "configMapKeyRef" in source else "secret"
            value = _from_source(source, kind, lookup, name)
            if value is not None:
                result[name] = value
        elif "resourceFieldRef" in source:
            result[name] = _resource_value(container, source["resourceFieldRef"])
        else:
            raise ContainerConfigError(f"env {name}: unsupported valueFrom {sorted(source)}")
    return result


def _resource_value(container: Mapping[str, Any], ref: Mapping[str, Any]) -> str:
    kind, _, resource = str(ref.get("resource", "")).partition(".")
    value = ((container.get("resources") or {}).get(kind) or {}).get(resource)
    return str(value) if value is not None else "0"


def secret_text(data: Mapping[str, str], key: str) -> str | None:
    """Secret values are base64 in the API; containers see the decoded bytes."""
    if key not in data:
        return None
    return base64.b64decode(data[key]).decode(errors="replace")


def command_line(
    container: Mapping[str, Any],
    entrypoint: list[str],
    default_args: list[str],
    env: Mapping[str, str],
) -> list[str]:
    """Docker/kubelet rules: command replaces the entrypoint (and drops the image's args)."""
    command = container.get("command")
    args = container.get("args")
    if command:
        argv = [expand(part, env) for part in [*command, *(args or [])]]
    elif args is not None:
        argv = [*entrypoint, *(expand(part, env) for part in args)]
    else:
        argv = [*entrypoint, *default_args]
    if not argv:
        raise ContainerConfigError(f"container {container.get('name')}: no command specified")
    return argv


def referenced_objects(container: Mapping[str, Any]) -> set[tuple[str, str]]:
    """(kind, name) of every ConfigMap and Secret the container's env reads."""
    found = set()
    for source in container.get("envFrom") or []:
        if "configMapRef" in source:
            found.add(("configmap", source["configMapRef"].get("name", "")))
        if "secretRef" in source:
            found.add(("secret", source["secretRef"].get("name", "")))
    for item in container.get("env") or []:
        source = item.get("valueFrom") or {}
        if "configMapKeyRef" in source:
            found.add(("configmap", source["configMapKeyRef"].get("name", "")))
        if "secretKeyRef" in source:
            found.add(("secret", source["secretKeyRef"].get("name", "")))
    return found


def lookups(
    objects: Mapping[tuple[str, str], Mapping[str, Any] | None],
) -> tuple[Lookup, Callable[[str, str], dict[str, str] | None]]:
    """Key lookups over fetched objects (None = object missing); secrets are decoded."""

    def values(kind: str, name: str) -> dict[str, str] | None:
        obj = objects.get((kind, name))
        if obj is None:
            return None
        data = obj.get("data") or {}
        if kind == "secret":
            return {k: secret_text(data, k) or "" for k in data}
        return dict(data)

    def key(kind: str, name: str, wanted: str) -> str | None:
        return (values(kind, name) or {}).get(wanted)

    return key, values
