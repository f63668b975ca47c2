"""What the tuned package's tests share: the README's package, a chroot host set up to run it,
and the Debian packages installed in that host."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

PACKAGE_DIR = Path(__file__).resolve().parents[1]
STATE = "/var/lib/skyhook-tuned"
FAST_CHECK = {"TUNED_START_TIMEOUT": "1"}


def readme_package() -> tuple[str, dict]:
    block = re.search(r"```yaml\n(.*?)```", (PACKAGE_DIR / "README.md").read_text(), re.S)
    assert block, "README.md has no yaml example"
    ((name, package),) = yaml.safe_load(block.group(1))["spec"]["packages"].items()
    return name, package


def make_host(factory):
    name, package = readme_package()
    env = {item["name"]: item["value"] for item in package["env"]} | FAST_CHECK
    host = factory("tuned", cr_name=name, cr_version=package["version"], env=env)
    host.set_configmap(package["configMap"])
    host.enable_network()
    return host


def installed_packages(host) -> set[str]:
    listing = host.chroot("dpkg-query -W -f='${Package} ${Status}\\n'").stdout
    return {line.split()[0] for line in listing.splitlines() if line.endswith(" installed")}
