"""Where everything lives: host paths (as steps see them) and their place under the root mount.

Pure path arithmetic, no I/O. The shapes are upstream's, so flags,
history and logs written by upstream's agent are recognised by ours and the other way round.
"""

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from skyhook_schemas.package_config import Step


def step_marker(arguments: Sequence[str], returncodes: Sequence[int]) -> str:
    """The flag-name suffix for a step: base64 of the Python repr of its raw config lists.

    Upstream keys a step's flag by ``repr(arguments)_repr(returncodes)`` before any ``env:``
    substitution, so editing either re-arms the step; we must produce identical bytes.
    """
    raw = f"{list(arguments)!r}_{list(returncodes)!r}"
    return base64.b64encode(raw.encode()).decode()


@dataclass(frozen=True)
class HostLayout:
    """Paths for one invocation.

    ``root_mount`` is where the host's ``/`` is visible to the agent (``/root`` in stage pods);
    ``copy_dir``, ``state_dir`` and ``log_dir`` are host paths (absolute, as steps see them).
    """

    root_mount: Path
    copy_dir: str
    state_dir: str
    log_dir: str

    def mounted(self, host_path: str | PurePosixPath) -> Path:
        """The agent-side path of a host path (upstream concatenates; so do we, safely)."""
        return self.root_mount / str(host_path).lstrip("/")

    # -- the package copy on the host -------------------------------------------------------
    @property
    def package_dir(self) -> Path:
        return self.mounted(self.copy_dir)

    @property
    def host_step_root(self) -> str:
        return f"{self.copy_dir.rstrip('/')}/skyhook_dir"

    def host_step_path(self, step: Step) -> str:
        return f"{self.host_step_root}/{step.path}"

    # -- state: flags, history, interrupt flags -----------------------------------------------
    @property
    def state_root(self) -> Path:
        return self.mounted(self.state_dir)

    @property
    def flags_dir(self) -> Path:
        return self.state_root / "flags"

    @property
    def start_flag(self) -> Path:
        return self.flags_dir / "START"

    @property
    def check_results(self) -> Path:
        return self.flags_dir / "check_results"

    def all_checked_flag(self, mode: str) -> Path:
        return self.flags_dir / f"{mode}_ALL_CHECKED"

    def step_flag(self, package: str, version: str, step: Step) -> Path:
        # The marker may contain "/", which (as upstream) makes a subdirectory.
        name = f"{step.path}_{step_marker(step.arguments, step.returncodes)}"
        return self.flags_dir / package / version / name

    def history_file(self, package: str) -> Path:
        return self.state_root / "history" / f"{package}.json"

    def interrupt_flags_dir(self, resource_id: str) -> Path:
        return self.state_root / "interrupts" / "flags" / resource_id

    # -- logs ----------------------------------------------------------------------------------
    def package_log_dir(self, package: str, version: str) -> Path:
        return self.mounted(self.log_dir) / package / version
