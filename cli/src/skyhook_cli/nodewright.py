"""The `kubectl-nodewright` entry point: the same commands, speaking upstream v0.18+'s API
(`nodewright.nvidia.com/v1alpha1`, kind `NodeWright`) and its node keys."""

from __future__ import annotations

import os


def speak_nodewright() -> None:
    # Every key and path the commands use is spelled once, as skyhook_schemas.keys is first
    # imported: the group is set before anything imports it.
    os.environ["SKYHOOK_API_GROUP"] = "nodewright.nvidia.com"


def main() -> None:
    speak_nodewright()
    from skyhook_cli.main import root  # noqa: PLC0415 (after the group is set)

    root.main(prog_name="nodewright")
