"""The agent's settings: the SKYHOOK_* (and two legacy) environment variables, read once.

Names, defaults and parsing rules match upstream's agent so stage pods built by either operator
behave the same (see docs/upstream-differences.md, "Agent", for the few deliberate changes).
"""

from collections.abc import Mapping
from dataclasses import dataclass

from skyhook_agent.errors import InputError


def _flag(env: Mapping[str, str], name: str, default: str) -> bool:
    # Upstream's rule: only a case-insensitive "true" enables; anything else disables.
    return env.get(name, default).strip().lower() == "true"


@dataclass(frozen=True)
class AgentSettings:
    """Everything the agent reads from its environment, with upstream's defaults."""

    resource_id: str = ""
    """SKYHOOK_RESOURCE_ID: ``<scr>-<uid>-<generation>_<package>_<version>``; keys interrupt
    flags and interrupt logs. Only interrupt mode requires it."""
    state_dir: str = "/etc/skyhook"
    """SKYHOOK_ROOT_DIR: host path (under the root mount) of flags, history and interrupts."""
    log_dir: str = "/var/log/skyhook"
    """SKYHOOK_LOG_DIR: host path (under the root mount) of per-step logs."""
    data_dir: str = "/skyhook-package"
    """SKYHOOK_DATA_DIR: package content in the agent's own filesystem, copied to the host copy
    dir only when that is missing (upstream's legacy mode)."""
    write_logs: bool = True
    """SKYHOOK_AGENT_WRITE_LOGS: write per-step log files (interrupt logs are always written)."""
    buffer_limit: int = 8192
    """SKYHOOK_AGENT_BUFFER_LIMIT: bytes per read of a step's stdout/stderr."""
    copy_resolv: bool = True
    """COPY_RESOLV: copy the agent's /etc/resolv.conf into the host root before running."""
    always_run_step: bool = False
    """OVERLAY_ALWAYS_RUN_STEP: ignore step flags (each ignored flag is reported)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "AgentSettings":
        """Read the settings; raise InputError listing every unusable value."""
        problems = []
        raw_limit = env.get("SKYHOOK_AGENT_BUFFER_LIMIT", "8192")
        try:
            buffer_limit = int(raw_limit)
            if buffer_limit <= 0:
                raise ValueError
        except ValueError:
            problems.append(
                f"SKYHOOK_AGENT_BUFFER_LIMIT: {raw_limit!r} is not a positive number of bytes"
            )
            buffer_limit = 8192
        dirs = {
            "SKYHOOK_ROOT_DIR": env.get("SKYHOOK_ROOT_DIR", "/etc/skyhook"),
            "SKYHOOK_LOG_DIR": env.get("SKYHOOK_LOG_DIR", "/var/log/skyhook"),
            "SKYHOOK_DATA_DIR": env.get("SKYHOOK_DATA_DIR", "/skyhook-package"),
        }
        problems += [
            f"{name}: {value!r} must be an absolute path"
            for name, value in dirs.items()
            if not value.startswith("/")
        ]
        if problems:
            raise InputError(problems)
        return cls(
            resource_id=env.get("SKYHOOK_RESOURCE_ID", ""),
            state_dir=dirs["SKYHOOK_ROOT_DIR"],
            log_dir=dirs["SKYHOOK_LOG_DIR"],
            data_dir=dirs["SKYHOOK_DATA_DIR"],
            write_logs=_flag(env, "SKYHOOK_AGENT_WRITE_LOGS", "true"),
            buffer_limit=buffer_limit,
            copy_resolv=_flag(env, "COPY_RESOLV", "true"),
            always_run_step=_flag(env, "OVERLAY_ALWAYS_RUN_STEP", "false"),
        )


@dataclass(frozen=True)
class ResourceId:
    """SKYHOOK_RESOURCE_ID split into its three ``_``-separated parts."""

    instance: str
    package: str
    version: str


def parse_resource_id(text: str) -> ResourceId:
    """Split ``<scr>-<uid>-<gen>_<package>_<version>``; InputError when not exactly 3 parts."""
    parts = text.split("_")
    if len(parts) != 3 or not all(parts):
        raise InputError(
            [
                f"SKYHOOK_RESOURCE_ID: {text!r} must be <scr>-<uid>-<generation>_<package>_"
                "<version> (three non-empty parts separated by '_')"
            ]
        )
    return ResourceId(*parts)
