"""The settings the core decides with: the subset of the operator's settings that shapes plans
(names, images, host paths, taint, retry timing), built by the operator's settings.py."""

from __future__ import annotations

from dataclasses import dataclass

from skyhook_planner.model.status_size import NODE_LISTS_BYTES
from skyhook_planner.model.vocabulary import Taint
from skyhook_schemas import keys
from skyhook_schemas.images import image_tag


@dataclass(frozen=True)
class PlannerSettings:
    """The defaults here are the operator's too: its settings read them from this class."""

    namespace: str = "skyhook"
    agent_image: str = "ghcr.io/nvidia/skyhook/agent:latest"
    pause_image: str = "registry.k8s.io/pause:3.10"
    copy_dir_root: str = "/var/lib/skyhook"
    agent_log_root: str = "/var/log/skyhook"
    runtime_required_taint: Taint = Taint(
        keys.RUNTIME_REQUIRED_TAINT_KEY,
        keys.RUNTIME_REQUIRED_TAINT_EFFECT,
        keys.RUNTIME_REQUIRED_TAINT_VALUE,
    )
    # Speaking nodewright.nvidia.com, the legacy group's default runtime-required taint, as
    # upstream v0.18+ does: a node that joined with it is tolerated and untainted too (never
    # tainted with it). Speaking skyhook.nvidia.com: none, as upstream before the rename.
    legacy_runtime_required_taint: Taint | None = (
        Taint(
            keys.SKYHOOK_GROUP,
            keys.RUNTIME_REQUIRED_TAINT_EFFECT,
            keys.RUNTIME_REQUIRED_TAINT_VALUE,
        )
        if keys.GROUP == keys.NODEWRIGHT_GROUP
        else None
    )
    reapply_on_reboot: bool = False
    image_pull_secret: str = ""
    # The Secrets of the operator's namespace a package's env may read (secretKeyRef); None:
    # not known here (the CLI's forecast), so not checked.
    package_secrets: frozenset[str] | None = None
    # PriorityClass of the Skyhook pods on nodes (stage, interrupt, health check); "": none.
    package_priority_class_name: str = ""
    # Failed stage pods (phase Failed) are retried after base * 2**restarts seconds, capped.
    retry_backoff_base_s: float = 10.0
    retry_backoff_max_s: float = 300.0
    # One attempt at a stage may run this long (a package's stageTimeout overrides it); 0: no
    # limit. A failed stage is tried again at most `stage_retries` times, then left erroring.
    stage_timeout_s: float = 3600.0
    stage_retries: int = 3
    # How long a finished stage pod is kept for its logs, after it succeeded or failed.
    pod_ttl_succeeded_s: float = 3600.0
    pod_ttl_failed_s: float = 86400.0
    # The running operator's version, written into the version annotations of nodes and SCRs.
    operator_version: str = "dev"
    # The per-node status lists are shortened past this many bytes (model/status_size.py).
    status_node_lists_bytes: int = NODE_LISTS_BYTES
    # While an alert gate holds, read the alerts again after this many seconds.
    alert_recheck_s: float = 30.0

    @property
    def runtime_required_taints(self) -> tuple[Taint, ...]:
        """The configured runtime-required taint, and the legacy group's default if any."""
        legacy = self.legacy_runtime_required_taint
        return (
            (self.runtime_required_taint,)
            if legacy is None
            else (self.runtime_required_taint, legacy)
        )

    @property
    def agent_version(self) -> str:
        """The agent image's tag, as upstream writes it into node metadata."""
        return image_tag(self.agent_image)
