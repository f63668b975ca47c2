"""Image compatibility artifacts: which of several images suits a node, from its labels.

An artifact follows Node Feature Discovery's image compatibility spec (`version`,
`compatibilities`: each a set of `rules` with an optional `weight`, `tag` and `description`),
as ocifit-k8s uses it: each compatibility set's `tag` is the image reference to run on nodes the
set's rules match. Rules are NFD's NodeFeatureGroup rules evaluated against node labels:
`matchFeatures` terms (all must match) and `matchAny` alternatives (one must match), each term a
set of `matchExpressions`, written either as NFD's map `{<label>: {op, value}}` or as ocifit's
list `[{key, op, value}]`. Every key is a node label name, e.g.
`feature.node.kubernetes.io/system-os_release.ID`; a term's `feature` only names the group.

`parse` validates an artifact (errors name the field); `choose` picks the image for one node.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from skyhook_schemas.images import ImageError, split_image

MEDIA_TYPE = "application/vnd.oci.image.compatibilities.v1+json"
# NFD's own layer media type for the same spec written as YAML.
NFD_MEDIA_TYPE = "application/vnd.nfd.image-compatibility.spec.v1alpha1+yaml"
MEDIA_TYPES = (MEDIA_TYPE, NFD_MEDIA_TYPE)

# NFD's operators; the number says how many values each takes (None: one or more).
OPERATORS: dict[str, int | None] = {
    "In": None,
    "NotIn": None,
    "InRegexp": None,
    "Exists": 0,
    "DoesNotExist": 0,
    "Gt": 1,
    "Lt": 1,
    "GtLt": 2,
    "IsTrue": 0,
    "IsFalse": 0,
}


class ArtifactError(ValueError):
    """A malformed artifact; `messages` holds one `field: problem` line per error."""

    def __init__(self, messages: list[str]) -> None:
        super().__init__("; ".join(messages))
        self.messages = messages


@dataclass(frozen=True)
class Expression:
    key: str
    op: str
    values: tuple[str, ...] = ()

    def mismatch(self, labels: Mapping[str, str]) -> str | None:
        """None when `labels` satisfy the expression, else why not."""
        value = labels.get(self.key)
        if value is None:
            # As NFD: a missing label satisfies only DoesNotExist.
            return None if self.op == "DoesNotExist" else f"{self.key} is not set"
        if self._holds(value):
            return None
        wanted = f" {list(self.values)}" if self.values else ""
        return f"{self.key}={value!r} is not {self.op}{wanted}"

    def _holds(self, value: str) -> bool:
        op = self.op
        if op == "In":
            return value in self.values
        if op == "NotIn":
            return value not in self.values
        if op == "InRegexp":
            return any(re.search(pattern, value) for pattern in self.values)
        if op == "Exists":
            return True
        if op == "DoesNotExist":
            return False
        if op in ("IsTrue", "IsFalse"):
            return value == ("true" if op == "IsTrue" else "false")
        number = _integer(value)
        if number is None:
            return False  # Gt/Lt/GtLt compare integers only
        bounds = [int(v) for v in self.values]
        if op == "Gt":
            return number > bounds[0]
        if op == "Lt":
            return number < bounds[0]
        return bounds[0] < number < bounds[1]  # GtLt


@dataclass(frozen=True)
class Term:
    """One `matchFeatures` element: all its expressions must hold."""

    feature: str
    expressions: tuple[Expression, ...]

    def mismatch(self, labels: Mapping[str, str]) -> str | None:
        return next((m for e in self.expressions if (m := e.mismatch(labels))), None)


@dataclass(frozen=True)
class Rule:
    name: str
    match_features: tuple[Term, ...] = ()
    match_any: tuple[tuple[Term, ...], ...] = ()

    def mismatch(self, labels: Mapping[str, str]) -> str | None:
        found = next((m for t in self.match_features if (m := t.mismatch(labels))), None)
        if found:
            return found
        if not self.match_any:
            return None
        reasons = [_all_mismatch(terms, labels) for terms in self.match_any]
        if any(reason is None for reason in reasons):
            return None
        return "none of matchAny holds (" + "; ".join(r for r in reasons if r) + ")"


@dataclass(frozen=True)
class Compatibility:
    """One candidate image and the rules a node must satisfy to get it."""

    index: int
    image: str
    rules: tuple[Rule, ...]
    weight: int = 0
    description: str = ""

    @property
    def label(self) -> str:
        """How status and node state name this candidate."""
        named = f" ({self.description})" if self.description else ""
        return f"compatibilities[{self.index}]{named}"

    def mismatch(self, labels: Mapping[str, str]) -> str | None:
        for rule in self.rules:
            reason = rule.mismatch(labels)
            if reason:
                return f"rule {rule.name!r}: {reason}" if rule.name else reason
        return None


@dataclass(frozen=True)
class Artifact:
    version: str
    compatibilities: tuple[Compatibility, ...]


@dataclass(frozen=True)
class Choice:
    """The image a node gets and the candidate whose rules it matched."""

    image: str
    matched: str


@dataclass(frozen=True)
class NoMatch:
    reason: str


def choose(artifact: Artifact, labels: Mapping[str, str]) -> Choice | NoMatch:
    """The highest-weight candidate whose every rule holds for `labels`; among equal weights the
    first in the artifact. NoMatch says, per candidate, the first thing that did not hold."""
    matching = [c for c in artifact.compatibilities if c.mismatch(labels) is None]
    if matching:
        best = max(matching, key=lambda c: (c.weight, -c.index))
        return Choice(best.image, best.label)
    reasons = [f"{c.label}: {c.mismatch(labels)}" for c in artifact.compatibilities]
    return NoMatch("no compatible image: " + "; ".join(reasons))


def pinned(image: str, version: str) -> str:
    """The reference pods pull: a candidate that names no tag or digest runs `version`, as a
    package's own `image` does."""
    reference = split_image(image)
    return image if reference.tag or reference.digest else f"{image}:{version}"


def _all_mismatch(terms: Sequence[Term], labels: Mapping[str, str]) -> str | None:
    return next((m for t in terms if (m := t.mismatch(labels))), None)


def _integer(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


# --- parsing ------------------------------------------------------------------------------------


def parse_text(
    text: str | bytes, media_type: str = MEDIA_TYPE, where: str = "artifact"
) -> Artifact:
    """Decode an artifact's bytes (JSON, or YAML for NFD's media type) and `parse` it."""
    if media_type not in MEDIA_TYPES:
        raise ArtifactError(
            [f"{where}: media type {media_type!r} is not one of {', '.join(MEDIA_TYPES)}"]
        )
    try:
        body = yaml.safe_load(text) if media_type == NFD_MEDIA_TYPE else json.loads(text)
    except (ValueError, yaml.YAMLError) as err:
        raise ArtifactError(
            [f"{where}: not valid {media_type.rsplit('+', 1)[-1].upper()}: {err}"]
        ) from None
    return parse(body, where)


def parse(body: object, where: str = "artifact") -> Artifact:
    """Validate a decoded artifact; every problem is reported, each naming its field."""
    errors: list[str] = []
    if not isinstance(body, Mapping):
        raise ArtifactError([f"{where}: expected an object with version and compatibilities"])
    version = body.get("version")
    if not isinstance(version, str) or not version:
        errors.append(f"{where}.version: required string (e.g. v1alpha1)")
    raw_sets = body.get("compatibilities")
    compatibilities: list[Compatibility] = []
    if not isinstance(raw_sets, list) or not raw_sets:
        errors.append(f"{where}.compatibilities: required non-empty list")
    else:
        for index, raw in enumerate(raw_sets):
            found = _compatibility(index, raw, f"{where}.compatibilities[{index}]", errors)
            if found:
                compatibilities.append(found)
    if errors:
        raise ArtifactError(errors)
    return Artifact(str(version), tuple(compatibilities))


def _compatibility(index: int, raw: object, path: str, errors: list[str]) -> Compatibility | None:
    if not isinstance(raw, Mapping):
        errors.append(f"{path}: expected an object")
        return None
    image = raw.get("tag")
    if not isinstance(image, str) or not image:
        errors.append(f"{path}.tag: required: the image reference this candidate selects")
    else:
        try:
            split_image(image)
        except ImageError as err:
            errors.append(f"{path}.tag: {err}")
    weight = raw.get("weight", 0)
    if not isinstance(weight, int) or isinstance(weight, bool) or weight < 0:
        errors.append(f"{path}.weight: must be a non-negative integer")
        weight = 0
    description = raw.get("description", "")
    if not isinstance(description, str):
        errors.append(f"{path}.description: must be a string")
        description = ""
    raw_rules = raw.get("rules")
    rules: list[Rule] = []
    if not isinstance(raw_rules, list) or not raw_rules:
        errors.append(f"{path}.rules: required non-empty list")
    else:
        rules = [_rule(r, f"{path}.rules[{i}]", errors) for i, r in enumerate(raw_rules)]
    return Compatibility(index, str(image or ""), tuple(rules), weight, description)


def _rule(raw: object, path: str, errors: list[str]) -> Rule:
    if not isinstance(raw, Mapping):
        errors.append(f"{path}: expected an object")
        return Rule("")
    name = raw.get("name", "")
    if not isinstance(name, str):
        errors.append(f"{path}.name: must be a string")
        name = ""
    features = _terms(raw.get("matchFeatures"), f"{path}.matchFeatures", errors)
    any_of: list[tuple[Term, ...]] = []
    raw_any = raw.get("matchAny")
    if raw_any is not None:
        if not isinstance(raw_any, list):
            errors.append(f"{path}.matchAny: must be a list of {{matchFeatures}} objects")
        else:
            for i, alternative in enumerate(raw_any):
                where = f"{path}.matchAny[{i}]"
                if not isinstance(alternative, Mapping):
                    errors.append(f"{where}: expected an object with matchFeatures")
                    continue
                any_of.append(
                    _terms(alternative.get("matchFeatures"), f"{where}.matchFeatures", errors)
                )
    if not features and not any_of:
        errors.append(f"{path}: needs matchFeatures or matchAny")
    return Rule(name, features, tuple(any_of))


def _terms(raw: object, path: str, errors: list[str]) -> tuple[Term, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        errors.append(f"{path}: must be a list of {{feature, matchExpressions}} objects")
        return ()
    terms = []
    for i, item in enumerate(raw):
        where = f"{path}[{i}]"
        if not isinstance(item, Mapping):
            errors.append(f"{where}: expected an object")
            continue
        feature = item.get("feature", "")
        if not isinstance(feature, str):
            errors.append(f"{where}.feature: must be a string")
            feature = ""
        expressions = _expressions(
            item.get("matchExpressions"), f"{where}.matchExpressions", errors
        )
        terms.append(Term(feature, expressions))
    return tuple(terms)


def _expressions(raw: object, path: str, errors: list[str]) -> tuple[Expression, ...]:
    pairs: list[tuple[str, object, str]] = []
    if isinstance(raw, Mapping) and raw:
        pairs = [(str(key), body, f"{path}.{key}") for key, body in raw.items()]
    elif isinstance(raw, list) and raw:
        for i, item in enumerate(raw):
            key = item.get("key") if isinstance(item, Mapping) else None
            if not isinstance(key, str) or not key:
                errors.append(f"{path}[{i}].key: required label name")
                continue
            pairs.append((key, item, f"{path}[{i}]"))
    else:
        errors.append(
            f"{path}: required: a map of label -> {{op, value}} or a list of {{key, op, value}}"
        )
    return tuple(e for key, body, where in pairs if (e := _expression(key, body, where, errors)))


def _expression(key: str, body: object, path: str, errors: list[str]) -> Expression | None:
    if not isinstance(body, Mapping):
        errors.append(f"{path}: expected {{op, value}}")
        return None
    op = body.get("op")
    if not isinstance(op, str) or op not in OPERATORS:
        errors.append(f"{path}.op: {op!r} is not one of {', '.join(OPERATORS)}")
        return None
    raw_values: Any = body.get("value", [])
    if isinstance(raw_values, str | int) and not isinstance(raw_values, bool):
        raw_values = [raw_values]
    if not isinstance(raw_values, list) or not all(isinstance(v, str | int) for v in raw_values):
        errors.append(f"{path}.value: must be a list of strings")
        return None
    values = tuple(str(v) for v in raw_values)
    count = OPERATORS[op]
    if count is None and not values:
        errors.append(f"{path}.value: {op} needs at least one value")
        return None
    if count is not None and len(values) != count:
        errors.append(
            f"{path}.value: {op} takes {count} value{'s' if count != 1 else ''}, got {len(values)}"
        )
        return None
    if op in ("Gt", "Lt", "GtLt") and any(_integer(v) is None for v in values):
        errors.append(f"{path}.value: {op} compares integers, got {list(values)}")
        return None
    if op == "GtLt" and int(values[0]) >= int(values[1]):
        errors.append(f"{path}.value: GtLt needs the lower bound first, got {list(values)}")
        return None
    if op == "InRegexp":
        for value in values:
            try:
                re.compile(value)
            except re.error as err:
                errors.append(f"{path}.value: {value!r} is not a regular expression: {err}")
                return None
    return Expression(key, str(op), values)


# --- pods: the mutating webhook's decision ------------------------------------------------------

SELECTION_PREFIX = "oci.image.compatibilities.selection/"
ENABLED_LABEL = SELECTION_PREFIX + "enabled"
TARGET_IMAGE_ANNOTATION = SELECTION_PREFIX + "target-image"
IMAGE_REF_ANNOTATION = SELECTION_PREFIX + "image-ref"
# Ours: which candidate the webhook chose, for whoever wonders why the pod runs that image.
MATCHED_ANNOTATION = SELECTION_PREFIX + "matched"
DEFAULT_PLACEHOLDER = "placeholder:latest"


@dataclass(frozen=True)
class PodDecision:
    """Either a JSON patch (allowed) or a refusal message."""

    patch: tuple[dict[str, Any], ...] = ()
    refusal: str = ""

    @property
    def allowed(self) -> bool:
        return not self.refusal


def artifact_reference(pod: Mapping[str, Any]) -> str:
    """The artifact the pod names (annotation image-ref), or "" when it names none."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(IMAGE_REF_ANNOTATION) or "")


def pod_patch(
    pod: Mapping[str, Any], node_labels: Sequence[Mapping[str, str]], artifact: Artifact
) -> PodDecision:
    """The patch that replaces the placeholder image in `pod`'s containers and initContainers
    with the image `artifact` chooses for the nodes the pod may land on: those its nodeSelector
    matches, or every node when it has none. Those nodes must all get the same image."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    annotations = metadata.get("annotations") or {}
    placeholder = str(annotations.get(TARGET_IMAGE_ANNOTATION) or DEFAULT_PLACEHOLDER)
    selector: Mapping[str, str] = spec.get("nodeSelector") or {}
    nodes = [n for n in node_labels if all(n.get(k) == v for k, v in selector.items())]
    if not nodes:
        named = f" matches nodeSelector {dict(selector)}" if selector else " is in the cluster"
        return PodDecision(refusal=f"image compatibility: no node{named}")
    choices = {choose(artifact, labels) for labels in nodes}
    unmatched = sorted(c.reason for c in choices if isinstance(c, NoMatch))
    if unmatched:
        return PodDecision(
            refusal=f"image compatibility: a node the pod may run on has {unmatched[0]}"
        )
    images = sorted({c.image for c in choices if isinstance(c, Choice)})
    if len(images) > 1:
        if not selector:
            return PodDecision(
                refusal="image compatibility: cluster is not homogeneous (nodes need "
                f"{', '.join(images)}) and the pod names no node flavour: set a nodeSelector"
            )
        return PodDecision(
            refusal=f"image compatibility: nodes matching nodeSelector {dict(selector)} need "
            f"different images ({', '.join(images)}); narrow the nodeSelector"
        )
    chosen = next(c for c in choices if isinstance(c, Choice))
    patch: list[dict[str, Any]] = []
    for kind in ("initContainers", "containers"):
        for index, container in enumerate(spec.get(kind) or ()):
            if container.get("image") == placeholder:
                patch.append(
                    {"op": "replace", "path": f"/spec/{kind}/{index}/image", "value": chosen.image}
                )
    if not patch:
        return PodDecision(
            refusal=f"image compatibility: no container's image is the placeholder {placeholder!r} "
            f"(annotation {TARGET_IMAGE_ANNOTATION})"
        )
    escaped = MATCHED_ANNOTATION.replace("~", "~0").replace("/", "~1")
    if annotations:
        patch.append(
            {"op": "add", "path": f"/metadata/annotations/{escaped}", "value": chosen.matched}
        )
    else:
        patch.append(
            {
                "op": "add",
                "path": "/metadata/annotations",
                "value": {MATCHED_ANNOTATION: chosen.matched},
            }
        )
    return PodDecision(patch=tuple(patch))
