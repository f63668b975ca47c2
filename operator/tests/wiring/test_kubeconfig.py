"""The operator reads its credentials as kubectl does: kubeconfig files merged from
$KUBECONFIG, paths relative to the file that names them, the in-cluster service account with its
rotating token; and a bad entry is refused naming it. Exec plugins and auth providers are left
to the `kubernetes` package, imported only for them."""

from __future__ import annotations

import base64
import datetime as dt
import os
import ssl
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from skyhook_operator.kube import credentials, webhooks
from skyhook_operator.kube.credentials import CredentialsError


def _write(path: Path, document: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(document))
    return path


def _single(path: Path, user: dict[str, Any], **cluster: Any) -> Path:
    return _write(
        path,
        {
            "clusters": [{"name": "c", "cluster": {"server": "https://api:6443/", **cluster}}],
            "users": [{"name": "u", "user": user}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "x",
        },
    )


def test_kubeconfig_files_merge_as_kubectl_merges_them(tmp_path: Path) -> None:
    first = _write(
        tmp_path / "a" / "config",
        {
            "current-context": "prod",
            "contexts": [{"name": "prod", "context": {"cluster": "prod", "user": "admin"}}],
            "users": [{"name": "admin", "user": {"token": "from-a"}}],
        },
    )
    second = _write(
        tmp_path / "b" / "config",
        {
            "current-context": "ignored",
            "clusters": [
                {
                    "name": "prod",
                    "cluster": {"server": "https://prod:6443", "certificate-authority": "ca.crt"},
                }
            ],
            "users": [{"name": "admin", "user": {"token": "from-b"}}],  # the first file wins
        },
    )
    found = credentials.load(None, {"KUBECONFIG": f"{first}{os.pathsep}{second}"})
    assert found.host == "https://prod:6443"
    assert found.ca_file == str(tmp_path / "b" / "ca.crt")  # relative to the file naming it
    assert found.verify
    assert found.authorization() == "Bearer from-a"


def test_embedded_client_certificates_load_without_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = webhooks.generate(["127.0.0.1"], dt.datetime.now(dt.UTC))
    user = {
        "client-certificate-data": base64.b64encode(made.cert).decode(),
        "client-key-data": base64.b64encode(made.key).decode(),
    }
    cluster = {"certificate-authority-data": base64.b64encode(made.ca).decode()}
    config = _single(tmp_path / "kube" / "config", user, **cluster)
    scratch = tmp_path / "tmp"  # where a temporary file would go
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr(tempfile, "tempdir", None)
    found = credentials.from_kubeconfig(str(config))
    assert found.ca_data == made.ca.decode()
    assert found.authorization() is None
    context = found.tls_context()  # loads the pair and the CA; a wrong key raises here
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.get_ca_certs()
    assert made.key.decode() not in repr(found)
    # Nothing a SIGKILL could leave behind: no file holds the key while the client runs.
    assert list(scratch.iterdir()) == []
    assert (found.cert_file, found.key_file) == (None, None)
    held = [Path(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")]
    assert not [fd for fd in held if fd.is_file() and _holds(fd, made.key)]


def _holds(path: Path, content: bytes) -> bool:
    try:
        return content in path.read_bytes()
    except OSError:
        return False


@pytest.mark.parametrize("written", ["false", "true", "no", 0, 1, "False"])
def test_insecure_skip_tls_verify_is_a_strict_boolean(tmp_path: Path, written: object) -> None:
    config = _single(tmp_path / "config", {"token": "t"}, **{"insecure-skip-tls-verify": written})
    with pytest.raises(CredentialsError) as refused:
        credentials.from_kubeconfig(str(config))
    assert str(refused.value) == (
        f"kubeconfig {config}: cluster 'c': insecure-skip-tls-verify must be true or false, "
        f"not {written!r}"
    )
    for value, verify in ((False, True), (True, False)):
        config = _single(tmp_path / "config", {"token": "t"}, **{"insecure-skip-tls-verify": value})
        assert credentials.from_kubeconfig(str(config)).verify is verify


def test_basic_authentication_and_skipped_verification(tmp_path: Path) -> None:
    config = _single(
        tmp_path / "config",
        {"username": "ada", "password": "s3cret"},
        **{"insecure-skip-tls-verify": True},
    )
    found = credentials.from_kubeconfig(str(config))
    assert found.authorization() == "Basic " + base64.b64encode(b"ada:s3cret").decode()
    assert not found.verify
    assert found.tls_context().verify_mode == ssl.CERT_NONE


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"contexts": []}, "no current-context is set"),
        ({"current-context": "gone"}, "no context named 'gone'"),
        (
            {
                "current-context": "x",
                "contexts": [{"name": "x", "context": {"cluster": "nowhere"}}],
            },
            "no cluster named 'nowhere'",
        ),
        (
            {
                "current-context": "x",
                "contexts": [{"name": "x", "context": {"cluster": "c"}}],
                "clusters": [{"name": "c", "cluster": {}}],
            },
            "cluster 'c' has no server",
        ),
    ],
)
def test_a_kubeconfig_that_cannot_be_used_is_refused_naming_the_entry(
    tmp_path: Path, document: dict[str, Any], message: str
) -> None:
    with pytest.raises(CredentialsError, match=message):
        credentials.from_kubeconfig(str(_write(tmp_path / "config", document)))


def test_a_user_entry_that_cannot_be_used_is_refused_naming_it(tmp_path: Path) -> None:
    half = _single(tmp_path / "half", {"client-certificate": "c.crt"})
    with pytest.raises(CredentialsError, match="user 'u': a client certificate needs both"):
        credentials.from_kubeconfig(str(half))
    garbled = _single(tmp_path / "garbled", {"client-key-data": "not base64!"})
    with pytest.raises(CredentialsError, match="client-key-data is not base64"):
        credentials.from_kubeconfig(str(garbled))
    with pytest.raises(CredentialsError, match="no such file"):
        credentials.from_kubeconfig(str(tmp_path / "missing"))


def test_in_cluster_reads_the_rotating_service_account_token(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("one")
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    found = credentials.in_cluster(env, tmp_path)
    assert found.host == "https://[fd00::1]:443"
    assert found.ca_file == str(tmp_path / "ca.crt")
    assert found.authorization() == "Bearer one"
    (tmp_path / "token").write_text("two\n")  # the kubelet rotated it
    assert found.authorization() == "Bearer two"
    with pytest.raises(CredentialsError, match="KUBERNETES_SERVICE_PORT must both be set"):
        credentials.in_cluster({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, tmp_path)
    with pytest.raises(CredentialsError, match="no service account token"):
        credentials.in_cluster(env, tmp_path / "elsewhere")


_IMPORTED = """
import sys
from skyhook_operator.kube import credentials
credentials.from_kubeconfig(sys.argv[1])
print("kubernetes" in sys.modules)
"""


def _imports_kubernetes(kubeconfig: Path) -> bool:
    done = subprocess.run(
        [sys.executable, "-c", _IMPORTED, str(kubeconfig)],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip() == "True"


def test_the_kubernetes_package_is_loaded_only_for_exec_plugins(tmp_path: Path) -> None:
    """About 8 MiB of modules stay out of an operator with a token or a certificate."""
    assert not _imports_kubernetes(_single(tmp_path / "token", {"token": "t"}))
    exec_user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "true"}}
    assert _imports_kubernetes(_single(tmp_path / "exec", exec_user))


@pytest.mark.parametrize(
    ("kubeconfig", "named"),
    [
        (None, "credentials: kubeconfig ~/.kube/config: no such file"),
        (
            {
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {"server": "https://api:6443", "proxy-url": "socks5://p:1080"},
                    }
                ],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            },
            "clusters[c].cluster.proxy-url",
        ),
    ],
    ids=["none", "unsupported-field"],
)
def test_the_operator_refuses_to_start_on_credentials_it_cannot_use_in_one_line(
    tmp_path: Path, kubeconfig: dict[str, Any] | None, named: str
) -> None:
    """What `skyhook-operator run` prints is the entry to fix, not a traceback; exit code 1."""
    environment = {
        key: value
        for key, value in os.environ.items()
        if key not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")
    }
    environment["HOME"] = str(tmp_path)
    if kubeconfig is not None:
        environment["KUBECONFIG"] = str(_write(tmp_path / "kubeconfig", kubeconfig))
    result = subprocess.run(
        [sys.executable, "-m", "skyhook_operator", "run"],
        capture_output=True,
        text=True,
        env=environment,
        timeout=60,
    )
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert "Error: credentials: " in result.stderr and named in result.stderr, result.stderr
