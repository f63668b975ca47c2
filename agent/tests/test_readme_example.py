"""The README example: the shellscript package with the demo SCR's configMap, run through the
agent stage by stage as the operator's stage pods run it, writes /skyhook-hello-world."""

import json
import re
import shutil
from pathlib import Path

import yaml

from conftest import STATE_DIR, Host

REPO = Path(__file__).resolve().parents[2]
SHELLSCRIPT = REPO / "packages" / "shellscript"
# The demo SCR exactly as users apply it (the operator ships it for `skyhook-operator demo`).
DEMO_SCR = REPO / "dev" / "src" / "skyhook_dev" / "demo-scr.yaml"


def demo_configmap() -> dict[str, str]:
    scr = yaml.safe_load(DEMO_SCR.read_text())
    configmap: dict[str, str] = scr["spec"]["packages"]["tuning"]["configMap"]
    # Test copy only: the demo snippets each end in "sleep 5" to make the rollout visible;
    # dropping those lines keeps this test fast without changing what the snippets write.
    return {key: re.sub(r"(?m)^\s*sleep \d+\s*$\n?", "", body) for key, body in configmap.items()}


def test_shellscript_demo_writes_hello_world_file(host: Host) -> None:
    configmap = demo_configmap()
    assert set(configmap) == {"apply.sh", "apply_check.sh", "config.sh", "config_check.sh"}
    assert not any("sleep" in body for body in configmap.values())
    # What the package-copy init container does: cp -rf /skyhook-package/* <copy dir>.
    package = host.path(host.copy_dir)
    shutil.copytree(SHELLSCRIPT, package)
    (package / "configmaps").mkdir()
    for key, body in configmap.items():
        (package / "configmaps" / key).write_text(body)

    env = {"SKYHOOK_RESOURCE_ID": "demo-uid-1_tuning_1.1.0"}
    for mode in ("apply", "apply-check", "config", "config-check"):
        result = host.run(mode, **env)
        assert result.returncode == 0, f"{mode}:\n{result.stdout}\n{result.stderr}"
        if mode == "apply":
            assert host.read("/skyhook-hello-world") == "hello world\n"
    assert host.read("/skyhook-hello-world") == "hello world\na config is run\n"

    # Host state in upstream's places: paths use config.json's name and version.
    flags = host.path(f"{STATE_DIR}/flags/shellscript/1.1.1")
    assert (flags / "shellscript_run.sh_WydhcHBseSddX1swXQ==").exists()
    history = json.loads(host.read(f"{STATE_DIR}/history/shellscript.json"))
    assert history["current-version"] == "1.1.1"
    assert host.path(f"{STATE_DIR}/flags/config-check_ALL_CHECKED").exists()
