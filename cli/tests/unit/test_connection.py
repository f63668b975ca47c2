"""The connection flags as kubectl reads them, checked on the client they build (no request
is sent): the kubeconfig's cluster and user replaced by --cluster and --user, basic
authentication, and compressed answers unless --disable-compression."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml

from skyhook_cli.kube import ConnectionFlags, KubeError, connect

KUBECONFIG = {
    "apiVersion": "v1",
    "kind": "Config",
    "current-context": "dev",
    "clusters": [
        {"name": "dev-cluster", "cluster": {"server": "https://dev.example:6443"}},
        {"name": "prod-cluster", "cluster": {"server": "https://prod.example:6443"}},
    ],
    "users": [
        {"name": "dev-user", "user": {"token": "dev-token"}},
        {"name": "prod-user", "user": {"token": "prod-token"}},
    ],
    "contexts": [{"name": "dev", "context": {"cluster": "dev-cluster", "user": "dev-user"}}],
}


@pytest.fixture
def kubeconfig(tmp_path: Path) -> str:
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(KUBECONFIG))
    return str(path)


def headers(flags: ConnectionFlags) -> tuple[str, dict[str, str]]:
    """The server and the headers every request of the client carries."""
    api = connect(flags).api
    sent = dict(api.default_headers)
    api.update_params_for_auth(sent, [], ["BearerToken"])
    return api.configuration.host, sent


def test_the_current_contexts_cluster_and_user_by_default(kubeconfig: str) -> None:
    host, sent = headers(ConnectionFlags(kubeconfig=kubeconfig))
    assert host == "https://dev.example:6443"
    assert sent["authorization"] == "Bearer dev-token"


def test_cluster_and_user_replace_the_contexts(kubeconfig: str) -> None:
    flags = ConnectionFlags(kubeconfig=kubeconfig, cluster="prod-cluster", user="prod-user")
    host, sent = headers(flags)
    assert host == "https://prod.example:6443"
    assert sent["authorization"] == "Bearer prod-token"


def test_a_cluster_the_kubeconfig_lacks_is_named(kubeconfig: str) -> None:
    with pytest.raises(KubeError, match="staging"):
        connect(ConnectionFlags(kubeconfig=kubeconfig, cluster="staging"))


def test_basic_authentication_replaces_the_kubeconfigs_token(kubeconfig: str) -> None:
    _, sent = headers(ConnectionFlags(kubeconfig=kubeconfig, username="ann", password="s3cret"))
    assert sent["Authorization"] == "Basic " + base64.b64encode(b"ann:s3cret").decode()
    assert "authorization" not in sent


def test_answers_are_compressed_unless_disabled(kubeconfig: str) -> None:
    assert headers(ConnectionFlags(kubeconfig=kubeconfig))[1]["Accept-Encoding"] == "gzip"
    off = ConnectionFlags(kubeconfig=kubeconfig, disable_compression=True)
    assert "Accept-Encoding" not in headers(off)[1]
