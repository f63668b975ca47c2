"""SBOMs for a pushed multi-platform image: one SPDX document per platform, attached to that
platform's manifest digest.

    python ci/_sbom.py            build syft and oras if missing (with progress), print their paths

For each platform of the image's index (attestation manifests left out), syft reads the image
from the registry and writes an SPDX JSON document of what is installed in it (the Python
distributions, the Debian packages), and oras attaches it as an OCI referrer whose subject is
that platform's manifest: `oras discover <image>@<digest>` lists it, `oras pull` fetches it.
Both tools are built from the Go module proxy once and cached (ci/_gotool.py); $SKYHOOK_SYFT and
$SKYHOOK_ORAS name binaries to use instead. Registry credentials are read by both from the
docker config, as `docker buildx build --push` reads them; a registry on loopback is spoken to
over plain HTTP (ci/local-build's).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from _gotool import GoTool, Say, ensure_all, print_paths

SYFT_VERSION = "v1.57.1"
ORAS_VERSION = "v1.3.6"
SBOM_ARTIFACT_TYPE = "application/spdx+json"
_ATTESTATION_PLATFORM = "unknown/unknown"  # buildx's attestation manifests in an index
_LOOPBACK = ("127.0.0.1", "localhost", "[::1]")

SYFT = GoTool(
    name="syft",
    module="github.com/anchore/syft",
    package="github.com/anchore/syft/cmd/syft",
    version=SYFT_VERSION,
    version_args=("version",),  # Application: syft / Version: 1.57.1 / ...
    link_flags=lambda _: f"-X main.version={SYFT_VERSION.removeprefix('v')}",
    version_word=3,
)
ORAS = GoTool(
    name="oras",
    module="oras.land/oras",
    package="oras.land/oras/cmd/oras",
    version=ORAS_VERSION,
    version_args=("version",),  # Version: 1.3.6 / Go version: ... (the version is in its source)
    version_word=1,
)
TOOLS = (SYFT, ORAS)


class SbomError(RuntimeError):
    """An SBOM could not be made or attached; the message says for which platform and why."""


@dataclass(frozen=True)
class AttachedSbom:
    platform: str  # os/arch[/variant]
    subject: str  # the platform's manifest digest
    digest: str  # the SBOM artifact's manifest digest
    packages: int | None  # how many packages the document lists; None: attached before


def ensure_tools(say: Say = print) -> dict[str, Path]:
    return ensure_all(TOOLS, say)


def plain_http(image: str) -> bool:
    """Whether the image's registry is one on this machine, spoken to over plain HTTP."""
    host = image.split("/", 1)[0]
    host = host[: host.index("]") + 1] if host.startswith("[") else host.split(":", 1)[0]
    return host in _LOOPBACK


def attach_sboms(image: str, say: Say = print) -> list[AttachedSbom]:
    """Make and attach one SBOM per platform of `image` (repository:tag, pushed as an index).
    A platform's image that has one attached already keeps it: a rerun adds nothing."""
    tools = ensure_tools(say)
    repository = image.split("@", 1)[0] if "@" in image else image.rsplit(":", 1)[0]
    http = ["--plain-http"] if plain_http(image) else []
    index = json.loads(_run([str(tools["oras"]), "manifest", "fetch", *http, image], image))
    platforms = [
        (_platform_name(entry.get("platform", {})), entry["digest"])
        for entry in index.get("manifests", ())
    ]
    platforms = [(name, digest) for name, digest in platforms if name != _ATTESTATION_PLATFORM]
    if not platforms:
        raise SbomError(f"{image} is not a multi-platform index: nothing to attach an SBOM to")
    env = {**os.environ, "SYFT_CHECK_FOR_APP_UPDATE": "false"}
    if http:
        env["SYFT_REGISTRY_INSECURE_USE_HTTP"] = "true"
    attached = []
    with tempfile.TemporaryDirectory(prefix="skyhook-sbom-") as workdir:
        for name, digest in platforms:
            subject = f"{repository}@{digest}"
            discover = [
                "discover",
                *http,
                "--format",
                "json",
                "--artifact-type",
                SBOM_ARTIFACT_TYPE,
            ]
            found = _run([str(tools["oras"]), *discover, subject], f"{name}: oras discover")
            referrers = json.loads(found).get("referrers") or []
            if referrers:
                say(f"SBOM for {name}: attached already as {referrers[0]['digest'][:19]}")
                attached.append(AttachedSbom(name, digest, referrers[0]["digest"], None))
                continue
            document = Path(workdir) / f"sbom-{name.replace('/', '-')}.spdx.json"
            say(f"SBOM for {name} ({digest[:19]}): syft scan")
            scan = ["scan", f"registry:{subject}", "-q", "-o", f"spdx-json={document}"]
            _run([str(tools["syft"]), *scan], f"{name}: syft", env=env)
            packages = len(json.loads(document.read_text()).get("packages", ()))
            attach = ["attach", *http, "--format", "json", "--artifact-type", SBOM_ARTIFACT_TYPE]
            attach += [subject, f"{document.name}:{SBOM_ARTIFACT_TYPE}"]
            answer = _run([str(tools["oras"]), *attach], f"{name}: oras attach", cwd=workdir)
            sbom = json.loads(answer)["digest"]
            say(f"SBOM for {name}: {packages} packages, attached as {sbom[:19]}")
            attached.append(AttachedSbom(name, digest, sbom, packages))
    return attached


def _platform_name(platform: dict[str, str]) -> str:
    parts = [platform.get("os", "unknown"), platform.get("architecture", "unknown")]
    if platform.get("variant"):
        parts.append(platform["variant"])
    return "/".join(parts)


def _run(
    command: list[str], what: str, env: dict[str, str] | None = None, cwd: str | None = None
) -> str:
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd)
    if result.returncode != 0:
        raise SbomError(f"{what}: {Path(command[0]).name} failed: {result.stderr.strip()[-2000:]}")
    return result.stdout


if __name__ == "__main__":
    sys.exit(print_paths(TOOLS, "ci/_sbom.py"))
