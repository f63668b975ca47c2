"""Kubernetes' own rules for the values a Skyhook spec copies into the pods and ConfigMaps the
operator creates: ConfigMap keys and size, environment variables, tolerations.

The apiserver refuses a pod or ConfigMap breaking them (HTTP 422), after the Skyhook itself was
stored; checked while decoding the spec, the Skyhook is refused at admission instead, or marked
invalid in its status when the webhooks are off. Each function mirrors the Kubernetes function
named in its docstring (k8s.io/apimachinery `util/validation`, k8s.io/kubernetes
`pkg/apis/core/validation`, as of v1.34) and returns problems as `(path below the value, text)`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from skyhook_planner.model.decoding import Loc
from skyhook_planner.model.vocabulary import is_object_name, label_key_problem, label_value_problem

Problems = Iterator[tuple[Loc, str]]

# A ConfigMap's keys and values together, in bytes (corev1.MaxSecretSize, used for both).
MAX_CONFIG_MAP_BYTES = 1024 * 1024

_CONFIG_MAP_KEY = re.compile(r"[-._a-zA-Z0-9]+")


def config_map_key_problem(key: str) -> str | None:
    """Why `key` cannot be a ConfigMap key, or None (validation.IsConfigMapKey)."""
    if len(key) > 253:
        return f"key {key[:40]!r}... is {len(key)} characters; a ConfigMap key has at most 253"
    if not _CONFIG_MAP_KEY.fullmatch(key):
        return (
            f"key {key!r} is not a valid ConfigMap key: letters, digits, '-', '_' or '.' only "
            "(it becomes a file name under configmaps/)"
        )
    if key in {".", ".."} or key.startswith(".."):
        return f"key {key!r} is not a valid ConfigMap key: it must not be '.' or start with '..'"
    return None


def config_map_size(data: Mapping[str, str]) -> int:
    """The size the apiserver holds against MAX_CONFIG_MAP_BYTES (core ValidateConfigMap)."""
    return sum(len(key.encode()) + len(value.encode()) for key, value in data.items())


def env_name_problem(name: str) -> str | None:
    """Why `name` cannot name an environment variable, or None (validation.IsRelaxedEnvVarName,
    the rule since RelaxedEnvironmentVariableValidation became the default)."""
    if any(not " " <= char <= "~" or char == "=" for char in name):
        return (
            f"{name!r} is not a valid environment variable name: printable ASCII characters "
            "other than '=' only"
        )
    return None


_VALUE_SOURCES = ("fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef")
# The pod fields an environment variable may read through fieldRef
# (validEnvDownwardAPIFieldPathExpressions), and the label or annotation subscripts.
_FIELD_PATHS = (
    "metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName",
    "spec.serviceAccountName", "status.hostIP", "status.hostIPs", "status.podIP",
    "status.podIPs",
)  # fmt: skip
_SUBSCRIPT = re.compile(r"metadata\.(labels|annotations)\['(.*)'\]")
# What resourceFieldRef may name (validContainerResourceFieldPathExpressions and prefixes).
_RESOURCES = tuple(
    f"{kind}.{resource}"
    for kind in ("limits", "requests")
    for resource in ("cpu", "memory", "ephemeral-storage")
)


def env_var_problems(env: Mapping[str, Any]) -> Problems:
    """What the apiserver would refuse in one environment variable (core ValidateEnv and
    validateEnvVarValueFrom)."""
    name = env.get("name")
    if not isinstance(name, str) or not name:
        yield ("name",), "required" if name in (None, "") else f"{name!r} is not a string"
    elif problem := env_name_problem(name):
        yield ("name",), problem
    value, source = env.get("value"), env.get("valueFrom")
    if value is not None and not isinstance(value, str):
        yield ("value",), f"{value!r} is not a string"
    if source is None:
        return
    if not isinstance(source, Mapping):
        yield ("valueFrom",), "must be an object"
        return
    given = [kind for kind in _VALUE_SOURCES if source.get(kind) is not None]
    if not given:
        yield ("valueFrom",), f"must set one of {', '.join(_VALUE_SOURCES)}"
    elif value:
        yield ("valueFrom",), "must not be set together with a non-empty value"
    elif len(given) > 1:
        yield ("valueFrom",), f"sets {', '.join(given)}; exactly one is allowed"
    for kind in given:
        body = source[kind]
        if not isinstance(body, Mapping):
            yield ("valueFrom", kind), "must be an object"
        else:
            yield from (
                (("valueFrom", kind, *at), text) for at, text in _source_problems(kind, body)
            )


def _source_problems(kind: str, body: Mapping[str, Any]) -> Problems:
    if kind in {"configMapKeyRef", "secretKeyRef"}:
        name, key = body.get("name"), body.get("key")
        if not isinstance(name, str) or not is_object_name(name):
            yield ("name",), f"{name!r} is not a valid object name (a DNS subdomain)"
        if not isinstance(key, str) or not key:
            yield ("key",), "required"
        elif problem := config_map_key_problem(key):
            yield ("key",), problem
    elif kind == "fieldRef":
        path = body.get("fieldPath")
        subscript = _SUBSCRIPT.fullmatch(path) if isinstance(path, str) else None
        if subscript:
            kind, key = subscript.groups()
            # Annotation keys are checked lowercased, label keys as written.
            if problem := label_key_problem(key.lower() if kind == "annotations" else key):
                yield ("fieldPath",), problem
        elif path not in _FIELD_PATHS:
            yield (
                ("fieldPath",),
                f"{path!r} is not a pod field an environment variable can read: one of "
                f"{', '.join(_FIELD_PATHS)}, metadata.labels['<key>'], "
                "metadata.annotations['<key>']",
            )
    else:  # resourceFieldRef
        resource = body.get("resource")
        hugepages = isinstance(resource, str) and resource.startswith(
            ("limits.hugepages-", "requests.hugepages-")
        )
        if resource not in _RESOURCES and not hugepages:
            yield (
                ("resource",),
                f"{resource!r} is not one of {', '.join(_RESOURCES)} or <limits|requests>.hugepages-<size>",
            )


def toleration_problems(
    key: str, operator: str, value: str, effect: str, seconds: int | None
) -> Problems:
    """What the apiserver would refuse in one toleration (core ValidateTolerations), given an
    operator and effect already known to be ones Kubernetes has."""
    if key and (problem := label_key_problem(key)):
        yield ("key",), problem
    if not key and operator != "Exists":
        yield (
            ("operator",),
            f"must be Exists when key is empty (an empty key matches every taint), not {operator}",
        )
    if seconds is not None and effect != "NoExecute":
        yield ("effect",), f"must be NoExecute when tolerationSeconds is set, not {effect!r}"
    if operator == "Exists" and value:
        yield ("value",), "must be empty when operator is Exists"
    elif operator == "Equal" and (problem := label_value_problem(value)):
        yield ("value",), problem
