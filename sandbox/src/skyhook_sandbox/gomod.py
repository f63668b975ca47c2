"""Pure helpers that turn a released Go module's go.mod into a wrapper module that can build it.

Kubernetes and etcd point their sibling modules at in-repo directories with `replace` lines
(`k8s.io/api => ./staging/src/k8s.io/api`, `go.etcd.io/etcd/api/v3 => ../api`). Those
directories are not in the module zips, so a wrapper module maps each of them to the copy
published on the module proxy instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_REPLACE_LINE = re.compile(r"^\s*(?:replace\s+)?(\S+)(?:\s+\S+)?\s+=>\s+(\.{1,2}/\S*)\s*$")


@dataclass(frozen=True)
class WrapperModule:
    """A throwaway module that requires one released module and blank-imports its commands."""

    name: str
    requires: tuple[tuple[str, str], ...]
    replaces: tuple[tuple[str, str, str], ...]  # (module, replacement module, version)
    imports: tuple[str, ...]
    go_version: str = "1.24.0"

    def go_mod(self) -> str:
        lines = [f"module {self.name}", "", f"go {self.go_version}", "", "require ("]
        lines += [f"\t{module} {version}" for module, version in self.requires]
        lines += [")", ""]
        if self.replaces:
            lines.append("replace (")
            lines += [f"\t{old} => {new} {version}" for old, new, version in self.replaces]
            lines += [")", ""]
        return "\n".join(lines)

    def imports_go(self) -> str:
        body = "\n".join(f'\t_ "{path}"' for path in self.imports)
        return f"//go:build tools\n\npackage tools\n\nimport (\n{body}\n)\n"


def local_replaces(go_mod_text: str) -> list[str]:
    """Modules that a go.mod replaces with a relative directory, in file order.

    `replace x => ./FORBIDDEN_DEPENDENCY` guards are skipped: they name modules the build must
    never pull in, so the wrapper leaves them alone.
    """
    modules: list[str] = []
    for line in go_mod_text.splitlines():
        match = _REPLACE_LINE.match(line.split("//", 1)[0])
        if match and "FORBIDDEN_DEPENDENCY" not in match.group(2):
            modules.append(match.group(1))
    return modules


def staging_version(kubernetes_version: str) -> str:
    """Kubernetes publishes its staging modules as v0.<minor>.<patch> for release v1.<minor>.<patch>."""
    match = re.fullmatch(r"v1\.(\d+)\.(\d+)", kubernetes_version)
    if not match:
        raise ValueError(
            f"kubernetes version {kubernetes_version!r}: expected a release like v1.34.4"
        )
    return f"v0.{match.group(1)}.{match.group(2)}"


# The package holding a command's code; kubectl's lives in its staging module, not under cmd/.
_COMMAND_PACKAGES = {"kubectl": "k8s.io/kubectl/pkg/cmd"}


def kubernetes_wrapper(version: str, go_mod_text: str, commands: tuple[str, ...]) -> WrapperModule:
    published = staging_version(version)
    return WrapperModule(
        name="skyhook.local/kubernetes-build",
        requires=(("k8s.io/kubernetes", version),),
        replaces=tuple((m, m, published) for m in local_replaces(go_mod_text)),
        imports=tuple(
            _COMMAND_PACKAGES.get(command, f"k8s.io/kubernetes/cmd/{command}/app")
            for command in commands
        ),
    )


def etcd_wrapper(version: str, go_mod_text: str) -> WrapperModule:
    return WrapperModule(
        name="skyhook.local/etcd-build",
        requires=(("go.etcd.io/etcd/server/v3", version),),
        replaces=tuple((m, m, version) for m in local_replaces(go_mod_text)),
        imports=("go.etcd.io/etcd/server/v3/etcdmain",),
    )


def version_ldflags(version: str) -> str:
    """-X flags so the apiserver reports its release instead of v0.0.0-master."""
    match = re.fullmatch(r"v(\d+)\.(\d+)\.\d+", version)
    if not match:
        raise ValueError(f"kubernetes version {version!r}: expected vMAJOR.MINOR.PATCH")
    pkg = "k8s.io/component-base/version"
    return " ".join(
        [
            "-s -w",
            f"-X {pkg}.gitVersion={version}",
            f"-X {pkg}.gitMajor={match.group(1)}",
            f"-X {pkg}.gitMinor={match.group(2)}",
            f"-X {pkg}.gitTreeState=clean",
        ]
    )
