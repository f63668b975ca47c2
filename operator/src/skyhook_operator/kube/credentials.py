"""Who the operator is to the apiserver: where it is, how its certificate is checked, and the
`Authorization` header each request carries.

Read here, without the official `kubernetes` package, for what a running operator meets: the
in-cluster service account (its token file re-read, so a rotated token is used) and kubeconfig
files with static credentials (`token`, `tokenFile`, `username`/`password`, client
certificates, the CA, `insecure-skip-tls-verify`) and the cluster's `tls-server-name`,
`proxy-url` and `disable-compression`, merged across `$KUBECONFIG`'s files as kubectl merges
them; any other field is refused naming it. Without a `proxy-url`, the proxy is the
environment's (`HTTPS_PROXY`, `NO_PROXY`), chosen as Go chooses it. A kubeconfig user with an `exec` plugin or an `auth-provider` is loaded by
the `kubernetes` package's loader, imported only then: with requests, urllib3, oauthlib and
dateutil it is about 8 MiB of modules the operator does not otherwise need (measured as the
growth of peak RSS when it is imported last).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import ipaddress
import os
import ssl
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
DEFAULT_KUBECONFIG = "~/.kube/config"

# Every field of a kubeconfig cluster, user and context (client-go's clientcmd/api/v1 types)
# the operator honours. Any other is refused naming it: ignored, it would send requests
# somewhere or as someone the kubeconfig did not mean.
CLUSTER_FIELDS = frozenset(
    {
        "server",
        "certificate-authority",
        "certificate-authority-data",
        "insecure-skip-tls-verify",
        "tls-server-name",
        "proxy-url",
        "disable-compression",
        "extensions",  # information for other programs: nothing to honour
    }
)
USER_FIELDS = frozenset(
    {
        "client-certificate",
        "client-certificate-data",
        "client-key",
        "client-key-data",
        "token",
        "tokenFile",
        "username",
        "password",
        "exec",
        "auth-provider",
        "extensions",
    }
)  # not honoured: impersonation (`as`, `as-uid`, `as-groups`, `as-user-extra`)
CONTEXT_FIELDS = frozenset({"cluster", "user", "namespace", "extensions"})
# The proxy schemes aiohttp speaks (CONNECT through it for https); client-go's socks5 is not.
PROXY_SCHEMES = ("http", "https")


class CredentialsError(ValueError):
    """A kubeconfig or service account the operator cannot use; the message says which entry."""


def _no_authorization() -> str | None:
    return None


@dataclass(frozen=True)
class Credentials:
    """The apiserver's address and how to talk to it. `authorization()` is the current header
    value (None: none is sent); it may read a file or run a loader, so callers keep it a while."""

    host: str
    verify: bool = True
    ca_file: str | None = None
    ca_data: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    authorization: Callable[[], str | None] = _no_authorization
    # A client certificate and key given in the kubeconfig itself (PEM): kept in memory only.
    cert_data: str | None = field(default=None, repr=False)
    key_data: str | None = field(default=None, repr=False)
    # The name the apiserver's certificate is checked against, when not the server's host.
    tls_server_name: str | None = None
    # The proxy requests go through (CONNECT for https), None: straight to the apiserver.
    proxy: str | None = None
    compression: bool = True  # False: answers are asked for uncompressed

    def tls_context(self) -> ssl.SSLContext:
        if self.verify:
            context = ssl.create_default_context(cafile=self.ca_file, cadata=self.ca_data)
        else:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.cert_file or self.cert_data:
            with (
                _readable(self.cert_file, self.cert_data) as cert,
                _readable(self.key_file, self.key_data) as key,
            ):
                context.load_cert_chain(cert, key)
        return context


@contextlib.contextmanager
def _readable(path: str | None, data: str | None) -> Iterator[str]:
    """A path `ssl` can load `data` from (it reads client certificates from files only): a
    memory file, never on disk and gone once closed, so a key outlives no process, not even
    a killed one. `path` when there is no data."""
    if data is None:
        yield path or ""
        return
    handle = os.memfd_create("skyhook-kubeconfig", os.MFD_CLOEXEC)
    try:
        os.write(handle, data.encode())
        yield f"/proc/self/fd/{handle}"
    finally:
        os.close(handle)


def load(kubeconfig: str | None = None, environ: Mapping[str, str] | None = None) -> Credentials:
    """Credentials from `kubeconfig` (a path, or several joined by the path separator as in
    `$KUBECONFIG`), `$KUBECONFIG`, the in-cluster service account, or ~/.kube/config, in that
    order."""
    env = os.environ if environ is None else environ
    paths = kubeconfig or env.get("KUBECONFIG")
    if not paths and env.get("KUBERNETES_SERVICE_HOST"):
        found = in_cluster(env)
    else:
        found = from_kubeconfig(paths or DEFAULT_KUBECONFIG)
    if found.proxy is None:  # a kubeconfig's proxy-url wins over the environment's
        found = dataclasses.replace(found, proxy=proxy_from_environment(found.host, env))
    return found


def proxy_from_environment(url: str, environ: Mapping[str, str]) -> str | None:
    """The proxy for `url` as Go's http.ProxyFromEnvironment picks it (client-go's default):
    HTTPS_PROXY for https URLs and HTTP_PROXY for http ones (the upper-case name first, then
    the lower-case), none for `localhost` or a loopback address, nor for a host NO_PROXY (or
    no_proxy) matches: `*`, the host, a domain and its subdomains (`*.domain` too), an IP
    address or a CIDR range, each optionally with a port."""
    parts = urlsplit(url)
    scheme = parts.scheme or "https"
    names = ("HTTPS_PROXY", "https_proxy") if scheme == "https" else ("HTTP_PROXY", "http_proxy")
    proxy = next((environ[name] for name in names if environ.get(name)), "")
    host = parts.hostname or ""
    if not proxy or host == "localhost" or _loopback(host):
        return None
    no_proxy = environ.get("NO_PROXY") or environ.get("no_proxy") or ""
    # Go reads `*.example.com` as `.example.com`; urllib would take the `*` literally (and
    # reads `.example.com` as `example.com`, its subdomains included).
    no_proxy = ",".join(entry.strip().removeprefix("*.") for entry in no_proxy.split(","))
    port = parts.port or (443 if scheme == "https" else 80)
    address = f"[{host}]" if ":" in host else host
    # urllib's own NO_PROXY matching (what urllib.request.proxy_bypass does on Linux, but for
    # the mapping given, not os.environ); typeshed leaves it out.
    bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]
    if bypass(f"{address}:{port}", {"no": no_proxy}):
        return None
    if _in_ranges(host, no_proxy):
        return None
    return proxy if "://" in proxy else f"http://{proxy}"  # Go reads a bare host:port so


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _in_ranges(host: str, no_proxy: str) -> bool:
    """Whether the IP address `host` is in a CIDR range NO_PROXY names (urllib does not read
    ranges; Go does)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    for entry in no_proxy.split(","):
        with contextlib.suppress(ValueError):
            if "/" in entry and address in ipaddress.ip_network(entry.strip(), strict=False):
                return True
    return False


def in_cluster(
    environ: Mapping[str, str] | None = None, account: Path = SERVICE_ACCOUNT
) -> Credentials:
    """The pod's service account: the apiserver from KUBERNETES_SERVICE_HOST/PORT, its CA and
    token from the mounted files. The token file is read on every call (the kubelet rotates
    it)."""
    env = os.environ if environ is None else environ
    host, port = env.get("KUBERNETES_SERVICE_HOST", ""), env.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise CredentialsError(
            "in-cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must both be set"
        )
    token_file = account / "token"
    if not token_file.is_file():
        raise CredentialsError(f"in-cluster: no service account token at {token_file}")
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    return Credentials(
        host=f"https://{host}:{port}",
        ca_file=str(account / "ca.crt"),
        authorization=_bearer_from_file(token_file),
    )


def from_kubeconfig(paths: str) -> Credentials:
    """The current context of the kubeconfig files in `paths`, merged as kubectl does: the
    first file to name a cluster, user or context (or set current-context) wins."""
    merged = _merge(paths)
    current = merged.current_context
    if not current:
        raise CredentialsError(f"kubeconfig {paths}: no current-context is set")
    context = _entry(merged.contexts, "context", current, paths).fields
    _honoured(context, CONTEXT_FIELDS, f"contexts[{current}].context", paths)
    cluster_name = str(context.get("cluster") or "")
    user_name = str(context.get("user") or "")
    cluster = _entry(merged.clusters, "cluster", cluster_name, paths)
    _honoured(cluster.fields, CLUSTER_FIELDS, f"clusters[{cluster_name}].cluster", paths)
    user = _entry(merged.users, "user", user_name, paths) if user_name else _Entry({}, Path())
    _honoured(user.fields, USER_FIELDS, f"users[{user_name}].user", paths)
    cluster_at = f"kubeconfig {paths}: clusters[{cluster_name}].cluster"
    connection: dict[str, Any] = {
        "tls_server_name": str(cluster.fields.get("tls-server-name") or "") or None,
        "proxy": _proxy_url(cluster, cluster_at),
        "compression": not _boolean(cluster, "disable-compression", cluster_at),
    }
    if user.fields.get("exec") or user.fields.get("auth-provider"):
        return dataclasses.replace(_delegated(paths), **connection)
    server = str(cluster.fields.get("server") or "")
    if not server:
        raise CredentialsError(f"kubeconfig {paths}: cluster {cluster_name!r} has no server")
    user_at = f"kubeconfig {paths}: user {user_name!r}"
    cert_data = _decoded(user, "client-certificate-data", user_at)
    key_data = _decoded(user, "client-key-data", user_at)
    cert_file, key_file = _client_certificate(user, user_at)
    return Credentials(
        host=server.rstrip("/"),
        verify=not _boolean(
            cluster, "insecure-skip-tls-verify", f"kubeconfig {paths}: cluster {cluster_name!r}"
        ),
        ca_file=cluster.path_of("certificate-authority"),
        ca_data=_decoded(
            cluster, "certificate-authority-data", f"kubeconfig {paths}: cluster {cluster_name!r}"
        ),
        cert_file=cert_file,
        key_file=key_file,
        authorization=_user_authorization(user, user_at),
        cert_data=cert_data,
        key_data=key_data,
        **connection,
    )


def _honoured(fields: Mapping[str, Any], known: frozenset[str], where: str, paths: str) -> None:
    """Refuse the first field the operator would not honour, naming it."""
    for name in fields:
        if name not in known:
            raise CredentialsError(
                f"kubeconfig {paths}: {where}.{name} is not supported by the operator "
                f"(it honours {', '.join(sorted(known))})"
            )


def _proxy_url(cluster: _Entry, where: str) -> str | None:
    url = str(cluster.fields.get("proxy-url") or "")
    if not url:
        return None
    scheme = urlsplit(url).scheme
    if scheme not in PROXY_SCHEMES or not urlsplit(url).hostname:
        raise CredentialsError(
            f"{where}.proxy-url: {url!r} is not an http:// or https:// proxy URL "
            "(socks5 proxies are not supported)"
        )
    return url


@dataclass(frozen=True)
class _Entry:
    """A cluster's or user's fields, and the directory of the file that defined it (relative
    paths in it are relative to that file, as kubectl reads them)."""

    fields: Mapping[str, Any]
    directory: Path

    def path_of(self, key: str) -> str | None:
        value = self.fields.get(key)
        if not value:
            return None
        return str(self.directory / Path(str(value)).expanduser())


@dataclass
class _Merged:
    clusters: dict[str, _Entry]
    users: dict[str, _Entry]
    contexts: dict[str, _Entry]
    current_context: str = ""


def _merge(paths: str) -> _Merged:
    merged = _Merged({}, {}, {})
    files = [Path(p).expanduser() for p in paths.split(os.pathsep) if p]
    readable = [f for f in files if f.is_file()]
    if not readable:
        raise CredentialsError(f"kubeconfig {paths}: no such file")
    for file in readable:
        try:
            document = yaml.safe_load(file.read_text()) or {}
        except (OSError, yaml.YAMLError) as err:
            raise CredentialsError(f"kubeconfig {file}: {err}") from err
        if not isinstance(document, dict):
            raise CredentialsError(f"kubeconfig {file}: not a mapping")
        for key, kind, into in (
            ("clusters", "cluster", merged.clusters),
            ("users", "user", merged.users),
            ("contexts", "context", merged.contexts),
        ):
            for item in document.get(key) or ():
                name = item.get("name") if isinstance(item, dict) else None
                if isinstance(name, str) and name not in into:
                    into[name] = _Entry(item.get(kind) or {}, file.parent)
        if not merged.current_context:
            merged.current_context = str(document.get("current-context") or "")
    return merged


def _entry(entries: Mapping[str, _Entry], kind: str, name: str, paths: str) -> _Entry:
    found = entries.get(name)
    if found is None:
        raise CredentialsError(f"kubeconfig {paths}: no {kind} named {name!r}")
    return found


def _decoded(entry: _Entry, key: str, where: str) -> str | None:
    value = entry.fields.get(key)
    if not value:
        return None
    try:
        return base64.b64decode(str(value), validate=True).decode()
    except (ValueError, UnicodeDecodeError) as err:
        raise CredentialsError(f"{where}: {key} is not base64 PEM: {err}") from err


def _boolean(entry: _Entry, key: str, where: str) -> bool:
    """A kubeconfig boolean: true or false as YAML writes them, false when absent. Anything
    else (a quoted "false" among them) is refused: read loosely, it could turn a check off."""
    value = entry.fields.get(key, False)
    if not isinstance(value, bool):
        raise CredentialsError(f"{where}: {key} must be true or false, not {value!r}")
    return value


def _client_certificate(user: _Entry, where: str) -> tuple[str | None, str | None]:
    """The client certificate's and key's file paths; each given as data instead counts as
    present (`Credentials` keeps the data)."""
    cert = user.path_of("client-certificate")
    key = user.path_of("client-key")
    has_cert = bool(cert or user.fields.get("client-certificate-data"))
    has_key = bool(key or user.fields.get("client-key-data"))
    if has_cert != has_key:
        raise CredentialsError(f"{where}: a client certificate needs both its certificate and key")
    return cert, key


def _user_authorization(user: _Entry, where: str) -> Callable[[], str | None]:
    fields = user.fields
    if fields.get("token"):
        header = f"Bearer {fields['token']}"
        return lambda: header
    token_file = user.path_of("tokenFile")
    if token_file:
        return _bearer_from_file(Path(token_file))
    if fields.get("username") or fields.get("password"):
        if not (fields.get("username") and fields.get("password")):
            raise CredentialsError(f"{where}: basic authentication needs username and password")
        pair = f"{fields['username']}:{fields['password']}".encode()
        header = f"Basic {base64.b64encode(pair).decode()}"
        return lambda: header
    return _no_authorization


def _bearer_from_file(path: Path) -> Callable[[], str | None]:
    def read() -> str | None:
        token = path.read_text().strip()
        return f"Bearer {token}" if token else None

    return read


def _delegated(paths: str) -> Credentials:
    """An exec plugin or an auth-provider: the `kubernetes` package's loader runs them and
    refreshes what they issue behind `get_api_key_with_prefix`."""
    from kubernetes import client, config  # noqa: PLC0415 - only for these users (module doc)

    configuration = client.Configuration()
    try:
        config.load_kube_config(config_file=paths, client_configuration=configuration)
    except config.ConfigException as err:
        raise CredentialsError(f"kubeconfig {paths}: {err}") from err

    def authorization() -> str | None:
        header = configuration.get_api_key_with_prefix("BearerToken")
        return str(header or configuration.get_api_key_with_prefix("authorization") or "") or None

    return Credentials(
        host=configuration.host.rstrip("/"),
        verify=bool(configuration.verify_ssl),
        ca_file=configuration.ssl_ca_cert or None,
        cert_file=configuration.cert_file or None,
        key_file=configuration.key_file or None,
        authorization=authorization,
    )
