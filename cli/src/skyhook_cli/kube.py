"""The plugin's only contact with the cluster: a kubernetes client built from kubeconfig flags.

Every call here goes through `Kube`, which turns API failures into `KubeError` with the
apiserver's own message (`skyhooks.skyhook.nvidia.com "x" not found`), as upstream prints them.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.kube_config import (
    KUBE_CONFIG_DEFAULT_LOCATION,
    KubeConfigLoader,
    KubeConfigMerger,
)

from skyhook_cli.patterns import quote as _q
from skyhook_schemas import keys
from skyhook_schemas.durations import parse_duration as parse_go_duration


class KubeError(Exception):
    """A failed API call or an unusable kubeconfig; the message is one line for the user."""


@dataclass
class ConnectionFlags:
    """The kubectl connection flags the plugin honours (see the README for the list)."""

    kubeconfig: str | None = None
    context: str | None = None
    cluster: str | None = None
    user: str | None = None
    server: str | None = None
    token: str | None = None
    username: str | None = None
    password: str | None = None
    certificate_authority: str | None = None
    client_certificate: str | None = None
    client_key: str | None = None
    insecure_skip_tls_verify: bool = False
    tls_server_name: str | None = None
    impersonate: str | None = None
    impersonate_groups: tuple[str, ...] = ()
    impersonate_uid: str | None = None
    request_timeout: str = "0"
    disable_compression: bool = False


def parse_duration(text: str) -> float:
    """kubectl's --request-timeout: a bare number of seconds or a Go duration (`1m30s`)."""
    seconds = parse_go_duration(text + "s" if re.fullmatch(r"\d+(\.\d+)?", text) else text)
    if seconds is None:
        raise ValueError(
            f"invalid duration {text!r}: give seconds or a duration such as 30s, 1m, 2h"
        )
    return seconds


def connect(flags: ConnectionFlags) -> Kube:
    configuration = client.Configuration()
    try:
        if flags.kubeconfig is None and not flags.server and _in_cluster():
            config.load_incluster_config(client_configuration=configuration)
        else:
            _load_kubeconfig(flags, configuration)
    except (ConfigException, OSError, TypeError, KeyError) as error:
        if not flags.server:
            raise KubeError(str(error) or type(error).__name__) from None
    _override(configuration, flags)
    headers = {}
    if flags.username is not None or flags.password is not None:
        if flags.token:
            raise KubeError("--username and --password cannot be given with --token")
        configuration.api_key = {}  # basic authentication replaces the kubeconfig's token
        basic = f"{flags.username or ''}:{flags.password or ''}"
        headers["Authorization"] = urllib3.util.make_headers(basic_auth=basic)["authorization"]
    if not flags.disable_compression:
        headers["Accept-Encoding"] = "gzip"  # as kubectl asks; urllib3 decodes the answer
    if flags.impersonate:
        headers["Impersonate-User"] = flags.impersonate
    if flags.impersonate_uid:
        headers["Impersonate-Uid"] = flags.impersonate_uid
    api_client = client.ApiClient(configuration)
    for name, value in headers.items():
        api_client.set_default_header(name, value)
    if flags.impersonate_groups:
        # Several groups in one header, comma-separated, as HTTP allows for repeated headers.
        api_client.set_default_header("Impersonate-Group", ", ".join(flags.impersonate_groups))
    try:
        timeout = parse_duration(flags.request_timeout)
    except ValueError as error:
        raise KubeError(str(error)) from None
    return Kube(api_client, timeout or None)


def _load_kubeconfig(flags: ConnectionFlags, configuration: client.Configuration) -> None:
    """The kubeconfig as kubectl reads it: the files of --kubeconfig (or $KUBECONFIG) merged,
    the context of --context (or the current one), with --cluster and --user replacing the
    context's cluster and user."""
    merged = KubeConfigMerger(flags.kubeconfig or KUBE_CONFIG_DEFAULT_LOCATION).config
    if merged is None:
        raise ConfigException("Invalid kube-config file. No configuration found.")
    name = flags.context or merged.safe_get("current-context")
    if not name:
        raise ConfigException("no context chosen: the kubeconfig has no current-context")
    context = merged["contexts"].get_with_name(name)["context"]
    for key, chosen in (("cluster", flags.cluster), ("user", flags.user)):
        if chosen:
            merged[f"{key}s"].get_with_name(chosen)  # names the one the kubeconfig lacks
            context.value[key] = chosen
    loader = KubeConfigLoader(config_dict=merged, active_context=name, config_base_path=None)
    loader.load_and_set(configuration)


def _in_cluster() -> bool:
    return "KUBERNETES_SERVICE_HOST" in os.environ and not (
        os.environ.get("KUBECONFIG") or os.path.exists(os.path.expanduser("~/.kube/config"))
    )


def _override(configuration: client.Configuration, flags: ConnectionFlags) -> None:
    if flags.server:
        configuration.host = flags.server
    if flags.token:
        configuration.api_key = {"authorization": f"Bearer {flags.token}"}
    if flags.certificate_authority:
        configuration.ssl_ca_cert = flags.certificate_authority
    if flags.client_certificate:
        configuration.cert_file = flags.client_certificate
    if flags.client_key:
        configuration.key_file = flags.client_key
    if flags.insecure_skip_tls_verify:
        configuration.verify_ssl = False
    if flags.tls_server_name:
        configuration.tls_server_name = flags.tls_server_name


def _message(error: Exception) -> str:
    if isinstance(error, ApiException):
        try:
            body = json.loads(error.body or "")
        except (TypeError, ValueError):
            body = None
        if isinstance(body, Mapping) and body.get("message"):
            return str(body["message"])
        return f"{error.status} {error.reason}".strip()
    return str(error)


def _unserved(error: Exception) -> str:
    """For a 404 of a kind the cluster does not serve (no object named): which API groups
    there are, and which plugin speaks the other."""
    if not (isinstance(error, ApiException) and error.status == 404):
        return ""
    try:
        details = (json.loads(error.body or "") or {}).get("details") or {}
    except (TypeError, ValueError, AttributeError):
        return ""
    if details.get("name"):
        return ""  # an object that is not there, in a kind that is
    other = keys.KINDS[keys.OTHER_GROUP][2]
    return (
        f" (this plugin speaks {keys.GROUP}, which the cluster does not serve; an operator "
        f"speaking {keys.OTHER_GROUP} is reached with kubectl {other})"
    )


@dataclass
class Kube:
    api: client.ApiClient
    timeout: float | None = None
    core: client.CoreV1Api = field(init=False)
    apps: client.AppsV1Api = field(init=False)
    custom: client.CustomObjectsApi = field(init=False)

    def __post_init__(self) -> None:
        self.core = client.CoreV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)

    def _call(self, what: str, function: Any, *args: Any, **kwargs: Any) -> Any:
        if self.timeout:
            kwargs["_request_timeout"] = self.timeout
        try:
            return function(*args, **kwargs)
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as error:
            raise KubeError(f"{what}: {_message(error)}{_unserved(error)}") from None

    # Skyhooks (cluster-scoped custom objects, read as plain dicts).

    def get_skyhook(self, name: str) -> dict[str, Any]:
        return dict(
            self._call(
                f"getting skyhook {_q(name)}",
                self.custom.get_cluster_custom_object,
                keys.GROUP,
                keys.VERSION,
                keys.PLURAL,
                name,
            )
        )

    def list_skyhooks(self) -> list[dict[str, Any]]:
        return list(
            self._call(
                "listing skyhooks",
                self.custom.list_cluster_custom_object,
                keys.GROUP,
                keys.VERSION,
                keys.PLURAL,
            )["items"]
        )

    def list_policies(self) -> list[dict[str, Any]]:
        return list(
            self._call(
                "listing deploymentpolicies",
                self.custom.list_cluster_custom_object,
                keys.GROUP,
                keys.VERSION,
                keys.POLICY_PLURAL,
            )["items"]
        )

    # Patches go out as the client chooses for a dict body: merge patches for Skyhooks, a
    # strategic merge patch for nodes, the same as a merge patch for the maps and the
    # unschedulable flag the plugin patches.
    def patch_skyhook(self, name: str, patch: Mapping[str, Any]) -> None:
        self._call(
            f"patching skyhook {_q(name)}",
            self.custom.patch_cluster_custom_object,
            keys.GROUP,
            keys.VERSION,
            keys.PLURAL,
            name,
            dict(patch),
        )

    def patch_skyhook_status(self, name: str, patch: Mapping[str, Any]) -> None:
        self._call(
            f"patching skyhook {_q(name)} status",
            self.custom.patch_cluster_custom_object_status,
            keys.GROUP,
            keys.VERSION,
            keys.PLURAL,
            name,
            dict(patch),
        )

    # Nodes.

    def list_nodes(self, selector: str = "") -> list[Any]:
        """Every node, or those `selector` (a label selector) matches."""
        return list(self._call("listing nodes", self.core.list_node, label_selector=selector).items)

    def patch_node(self, name: str, patch: Mapping[str, Any]) -> None:
        self._call(
            f"patching node {_q(name)}",
            self.core.patch_node,
            name,
            dict(patch),
        )

    # Pods and deployments in the operator's namespace.

    def list_pods(self, namespace: str, selector: str) -> list[Any]:
        return list(
            self._call(
                "listing pods", self.core.list_namespaced_pod, namespace, label_selector=selector
            ).items
        )

    def delete_pod(self, namespace: str, name: str) -> None:
        """Delete a pod; one already gone is no error."""
        timeout = {"_request_timeout": self.timeout} if self.timeout else {}
        try:
            self.core.delete_namespaced_pod(name, namespace, **timeout)
        except ApiException as error:
            if error.status != 404:
                raise KubeError(f"deleting pod {name}: {_message(error)}") from None
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise KubeError(f"deleting pod {name}: {_message(error)}") from None

    def list_bound_pods(self) -> list[dict[str, Any]]:
        """Every pod scheduled to a node, in all namespaces, as JSON dicts."""
        found = self._call(
            "listing pods",
            self.core.list_pod_for_all_namespaces,
            field_selector="spec.nodeName!=",
        )
        return [self.as_json(pod) for pod in found.items]

    def list_configmaps(self, namespace: str) -> list[dict[str, Any]]:
        found = self._call(
            f"listing configmaps in namespace {_q(namespace)}",
            self.core.list_namespaced_config_map,
            namespace,
        )
        return [self.as_json(configmap) for configmap in found.items]

    def as_json(self, obj: Any) -> dict[str, Any]:
        """A client model as the API's JSON (camelCase keys, RFC 3339 times)."""
        return dict(self.api.sanitize_for_serialization(obj))

    def pod_log(
        self, namespace: str, pod: str, container: str, follow: bool, tail: int | None
    ) -> Iterator[bytes]:
        options: dict[str, Any] = {"container": container, "follow": follow}
        if tail is not None:
            options["tail_lines"] = tail
        timeout, self.timeout = self.timeout, None  # a followed log may run for hours
        try:
            response = self._call(
                "opening log stream",
                self.core.read_namespaced_pod_log,
                pod,
                namespace,
                _preload_content=False,
                **options,
            )
        finally:
            self.timeout = timeout
        try:
            yield from response.stream(4096)
        finally:
            response.release_conn()

    def list_deployments(self, namespace: str) -> list[Any]:
        """The deployments in `namespace`; "" lists every namespace's."""
        if not namespace:
            return list(
                self._call(
                    "listing deployments in every namespace",
                    self.apps.list_deployment_for_all_namespaces,
                ).items
            )
        return list(
            self._call(
                f"listing deployments in namespace {_q(namespace)}",
                self.apps.list_namespaced_deployment,
                namespace,
            ).items
        )
