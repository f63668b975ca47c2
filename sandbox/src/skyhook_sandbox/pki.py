"""Key material for one sandbox: a CA, the apiserver's serving certificate, the service-account
signing key pair and static bearer tokens. Made with the openssl CLI, once per state dir."""

from __future__ import annotations

import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Pki:
    ca_cert: Path
    serving_cert: Path
    serving_key: Path
    sa_key: Path
    sa_pub: Path
    token_file: Path
    admin_token: str
    controller_token: str
    node_token: str


def _openssl(*args: str) -> None:
    result = subprocess.run(["openssl", *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args[:2])} failed: {result.stderr.strip()}")


def _read_tokens(token_file: Path) -> dict[str, str]:
    tokens = {}
    for line in token_file.read_text().splitlines():
        token, user, *_ = line.split(",")
        tokens[user] = token
    return tokens


def ensure_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    paths = {
        name: directory / name
        for name in ("ca.crt", "ca.key", "apiserver.crt", "apiserver.key", "sa.key", "sa.pub")
    }
    token_file = directory / "tokens.csv"
    if not all(path.exists() for path in paths.values()):
        _openssl("genrsa", "-out", str(paths["ca.key"]), "2048")
        _openssl(
            "req", "-x509", "-new", "-key", str(paths["ca.key"]), "-days", "3650",
            "-subj", "/CN=skyhook-sandbox-ca", "-out", str(paths["ca.crt"]),
        )  # fmt: skip
        _openssl("genrsa", "-out", str(paths["apiserver.key"]), "2048")
        csr = directory / "apiserver.csr"
        _openssl(
            "req", "-new", "-key", str(paths["apiserver.key"]), "-subj", "/CN=kube-apiserver",
            "-out", str(csr),
        )  # fmt: skip
        extensions = directory / "apiserver.ext"
        extensions.write_text(
            "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,"
            "DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:10.0.0.1\n"
            "extendedKeyUsage=serverAuth\n"
        )
        _openssl(
            "x509", "-req", "-in", str(csr), "-CA", str(paths["ca.crt"]),
            "-CAkey", str(paths["ca.key"]), "-CAcreateserial", "-days", "3650",
            "-extfile", str(extensions), "-out", str(paths["apiserver.crt"]),
        )  # fmt: skip
        _openssl("genrsa", "-out", str(paths["sa.key"]), "2048")
        _openssl("rsa", "-in", str(paths["sa.key"]), "-pubout", "-out", str(paths["sa.pub"]))
    if not token_file.exists():
        # Everyone here is a cluster admin: the sandbox tests the operator, not RBAC of the
        # control plane itself. The operator's own RBAC is exercised with its service account.
        token_file.write_text(
            "".join(
                f"{secrets.token_hex(16)},{user},{user},system:masters\n"
                for user in ("admin", "system:kube-controller-manager", "skyhook-sandbox-nodes")
            )
        )
        token_file.chmod(0o600)
    tokens = _read_tokens(token_file)
    return Pki(
        ca_cert=paths["ca.crt"],
        serving_cert=paths["apiserver.crt"],
        serving_key=paths["apiserver.key"],
        sa_key=paths["sa.key"],
        sa_pub=paths["sa.pub"],
        token_file=token_file,
        admin_token=tokens["admin"],
        controller_token=tokens["system:kube-controller-manager"],
        node_token=tokens["skyhook-sandbox-nodes"],
    )
