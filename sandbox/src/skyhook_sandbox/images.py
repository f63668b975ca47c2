"""The image map: which local content and behaviour stands for a container image reference.

A map is YAML: `images:` is a list of rules, first match wins. Each rule has
  image:  a repository without tag or digest; `*` matches one path segment, captured as {name}
  run:    agent | files | pull | image | agentless | pause | host
  source: (files) directory whose content the image holds; {packages} and {name} expand
  path:   (files) where that content appears in the container; (pull) the directory of the
          pulled image that is mounted there, e.g. /skyhook-package
  insecure: (pull, image) the registry speaks plain HTTP (a local one)
  entrypoint / args: optional overrides of the image's ENTRYPOINT / CMD
`pull` fetches the image itself from its registry (pull.py: skopeo and umoci) for the node's
architecture, once per image digest, instead of mapping it to a local folder: e.g.
  - {image: "127.0.0.1:5000/skyhook-packages/*", run: pull, path: /skyhook-package, insecure: true}
`image` pulls it the same way and runs it as a container runtime would: the whole image is the
container's root filesystem (copy-on-write), the pod's volumes are mounted inside it, and the
command is the image's ENTRYPOINT and CMD (the pod's command and args replace them as in
Kubernetes), run with the image's Env, WorkingDir and User, chrooted (imageroot.py): e.g.
  - {image: "127.0.0.1:5000/skyhook/agent", run: image, insecure: true}
Rules from a user map (`--image-map` / SKYHOOK_SANDBOX_IMAGE_MAP) are checked before the
defaults. A reference no rule matches gives the pod an ErrImagePull waiting state.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from skyhook_sandbox import agentpython
from skyhook_sandbox.pull import ImagePuller, PullError

RUN_KINDS = ("agent", "files", "pull", "image", "agentless", "pause", "host")

DEFAULT_RULES: list[dict[str, Any]] = [
    {"image": "ghcr.io/nvidia/skyhook/agent", "run": "agent"},
    {"image": "nvcr.io/nvidia/skyhook/agent", "run": "agent"},
    {"image": "ghcr.io/nvidia/skyhook/agentless", "run": "agentless"},
    {
        "image": "ghcr.io/nvidia/skyhook-packages/*",
        "run": "files",
        "source": "{packages}/{name}",
        "path": "/skyhook-package",
    },
    {"image": "registry.k8s.io/pause", "run": "pause"},
    # Plain base images for workload pods: the machine's own tools stand in for them.
    {"image": "docker.io/library/busybox", "run": "host"},
    {"image": "docker.io/library/debian", "run": "host"},
    {"image": "docker.io/library/ubuntu", "run": "host"},
]

# Upstream's e2e test image: print the arguments, sleep SLEEP_LEN seconds (5-9 at random when
# unset), exit EXIT_CODE (0 when unset).
AGENTLESS_SCRIPT = (
    'echo "agentless: $*"; sleep "${SLEEP_LEN:-$(shuf -i 5-9 -n 1)}"; exit "${EXIT_CODE:-0}"'
)
# The pause container: sleep until told to stop, then exit 0.
PAUSE_SCRIPT = "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"


class ImageMapError(ValueError):
    """A map file is malformed; the message names the rule and field."""


class ImageNotFound(LookupError):
    """No rule matches the reference, or its pull failed (the pod shows ErrImagePull)."""


@dataclass(frozen=True)
class PullRule:
    """What a `run: pull` rule asks of the registry: the image, and the directory to mount;
    or a `run: image` rule: the image as the root, and the rule's ENTRYPOINT / CMD overrides."""

    reference: str
    path: str
    insecure: bool = False
    as_root: bool = False
    entrypoint: tuple[str, ...] | None = None
    args: tuple[str, ...] | None = None


@dataclass(frozen=True)
class ResolvedImage:
    reference: str
    entrypoint: list[str]
    args: list[str]
    content: list[tuple[str, str]] = field(default_factory=list)  # (source dir, path in container)
    env: dict[str, str] = field(default_factory=dict)
    # The image's own entrypoint reads and writes no file (pause, agentless): run unchanged,
    # it behaves the same without the mount namespace, so it may start as a plain process.
    touches_no_files: bool = False
    # Set until the image is pulled (ImageMap.pulled): then `content` holds the pulled directory,
    # or for `run: image` the fields below come from the image.
    pull: PullRule | None = None
    root: str = ""  # the unpacked image the container runs chrooted in
    working_dir: str = ""
    user: str = ""


def repository(reference: str) -> str:
    """`busybox:1.36` -> `docker.io/library/busybox`; tags and digests dropped."""
    ref = reference.split("@", 1)[0]
    last_slash = ref.rfind("/")
    colon = ref.rfind(":")
    if colon > last_slash:
        ref = ref[:colon]
    parts = ref.split("/")
    if len(parts) == 1:
        parts = ["docker.io", "library", *parts]
    elif "." not in parts[0] and ":" not in parts[0] and parts[0] != "localhost":
        parts = ["docker.io", *parts]
    return "/".join(parts)


def default_packages_dir() -> Path:
    override = os.environ.get("SKYHOOK_PACKAGES_DIR")
    if override:
        return Path(override)
    # An editable install: sandbox/src/skyhook_sandbox/images.py -> repository root.
    return Path(__file__).resolve().parents[3] / "packages"


def _pattern(image: str) -> re.Pattern[str]:
    return re.compile(
        "^" + "/".join("([^/]+)" if p == "*" else re.escape(p) for p in image.split("/")) + "$"
    )


def validate_rules(rules: object, origin: str) -> list[dict[str, Any]]:
    if not isinstance(rules, list):
        raise ImageMapError(f"{origin}: images: expected a list of rules")
    for index, rule in enumerate(rules):
        where = f"{origin}: images[{index}]"
        if not isinstance(rule, dict):
            raise ImageMapError(f"{where}: expected a mapping")
        if not isinstance(rule.get("image"), str) or not rule["image"]:
            raise ImageMapError(f"{where}.image: required string (a repository, * for one segment)")
        if rule.get("run") not in RUN_KINDS:
            raise ImageMapError(f"{where}.run: must be one of {', '.join(RUN_KINDS)}")
        if rule["run"] == "files":
            for key in ("source", "path"):
                if not isinstance(rule.get(key), str):
                    raise ImageMapError(f"{where}.{key}: required for run: files")
        if rule["run"] == "pull" and not (
            isinstance(rule.get("path"), str) and rule["path"].startswith("/")
        ):
            raise ImageMapError(f"{where}.path: required for run: pull, an absolute path")
        if rule["run"] == "image" and "path" in rule:
            raise ImageMapError(
                f"{where}.path: not used by run: image, whose whole image is the container's "
                f"root (run: pull mounts one directory of an image)"
            )
        if rule["run"] in ("pull", "image") and not isinstance(rule.get("insecure", False), bool):
            raise ImageMapError(f"{where}.insecure: expected true or false")
        for key in ("entrypoint", "args"):
            if key in rule and not (
                isinstance(rule[key], list) and all(isinstance(x, str) for x in rule[key])
            ):
                raise ImageMapError(f"{where}.{key}: expected a list of strings")
    return rules


def load_map_file(path: Path) -> list[dict[str, Any]]:
    try:
        document = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise ImageMapError(f"{path}: {error}") from error
    if not isinstance(document, dict) or "images" not in document:
        raise ImageMapError(f"{path}: expected a mapping with an `images` list")
    return validate_rules(document["images"], str(path))


class ImageMap:
    def __init__(
        self,
        extra_rules: list[dict[str, Any]] | None = None,
        packages_dir: Path | None = None,
        pull_dir: Path | None = None,
    ):
        self.rules = [*(extra_rules or []), *DEFAULT_RULES]
        self.packages_dir = packages_dir or default_packages_dir()
        self.puller = ImagePuller(pull_dir or Path("/var/tmp/skyhook-sandbox-images"))
        self._compiled = [(_pattern(repository(rule["image"])), rule) for rule in self.rules]

    @classmethod
    def from_environment(
        cls, map_file: Path | None = None, pull_dir: Path | None = None
    ) -> ImageMap:
        path = map_file or (
            Path(os.environ["SKYHOOK_SANDBOX_IMAGE_MAP"])
            if os.environ.get("SKYHOOK_SANDBOX_IMAGE_MAP")
            else None
        )
        return cls(load_map_file(path) if path else None, pull_dir=pull_dir)

    async def pulled(self, image: ResolvedImage, arch: str) -> ResolvedImage:
        """`image` with a `run: pull` rule's content pulled for linux/`arch`; else `image`."""
        if image.pull is None:
            return image
        rule = image.pull
        try:
            pulled = await self.puller.pull(rule.reference, arch, rule.insecure)
        except PullError as error:
            raise ImageNotFound(f'pulling image "{rule.reference}": {error}') from error
        if rule.as_root:
            config = pulled.config
            entrypoint = config.entrypoint if rule.entrypoint is None else list(rule.entrypoint)
            return dataclasses.replace(
                image,
                entrypoint=entrypoint,
                args=config.cmd if rule.args is None else list(rule.args),
                env=config.env,
                root=str(pulled.rootfs),
                working_dir=config.working_dir,
                user=config.user,
                pull=None,
            )
        source = pulled.rootfs / rule.path.lstrip("/")
        if not source.is_dir():
            raise ImageNotFound(f'image "{rule.reference}" has no directory {rule.path}')
        return dataclasses.replace(image, content=[(str(source), rule.path)], pull=None)

    def resolve(self, reference: str) -> ResolvedImage:
        repo = repository(reference)
        for pattern, rule in self._compiled:
            match = pattern.match(repo)
            if match:
                return self._build(reference, rule, match.groups())
        raise ImageNotFound(
            f'image "{reference}" is not in the sandbox image map (no rule matches {repo})'
        )

    def _build(
        self, reference: str, rule: dict[str, Any], captured: tuple[str, ...]
    ) -> ResolvedImage:
        kind = rule["run"]
        name = captured[0] if captured else ""
        entrypoint: list[str] = []
        env: dict[str, str] = {}
        content: list[tuple[str, str]] = []
        pull = None
        if kind == "pull":
            pull = PullRule(reference, rule["path"], bool(rule.get("insecure", False)))
        elif kind == "image":
            pull = PullRule(
                reference,
                "/",
                bool(rule.get("insecure", False)),
                as_root=True,
                entrypoint=tuple(rule["entrypoint"]) if "entrypoint" in rule else None,
                args=tuple(rule["args"]) if "args" in rule else None,
            )
        if kind == "agent":
            entrypoint = [agentpython.container_python(), "-m", "skyhook_agent.controller"]
            env = agentpython.agent_image_env()
        elif kind == "agentless":
            entrypoint = ["/bin/sh", "-c", AGENTLESS_SCRIPT, "agentless"]
        elif kind == "pause":
            entrypoint = ["/bin/sh", "-c", PAUSE_SCRIPT]
        elif kind == "files":
            source = Path(rule["source"].format(packages=self.packages_dir, name=name))
            if not source.is_dir():
                raise ImageNotFound(
                    f'image "{reference}": mapped to {source}, which does not exist'
                )
            content = [(str(source), rule["path"])]
        return ResolvedImage(
            reference=reference,
            entrypoint=list(rule.get("entrypoint", entrypoint)),
            args=list(rule.get("args", [])),
            content=content,
            env=env,
            touches_no_files=kind in ("agentless", "pause") and "entrypoint" not in rule,
            pull=pull,
        )
