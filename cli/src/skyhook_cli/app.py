"""What every command shares: global flags, the kube client, output and errors.

Global flags are accepted before or after the command name (`kubectl skyhook -o json node
list` and `kubectl skyhook node list -o json`), as kubectl plugins built on cobra accept them.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO, TypeVar

import click
from click.core import ParameterSource
from click.shell_completion import CompletionItem

from skyhook_cli import output
from skyhook_cli.kube import ConnectionFlags, Kube, KubeError, connect
from skyhook_cli.operator_version import looks_like_skyhook
from skyhook_cli.patterns import quote
from skyhook_schemas import keys

F = TypeVar("F", bound=Callable[..., Any])
C = TypeVar("C", bound=click.Command)
FLAGS_KEY = "skyhook_cli.flags"
DEFAULT_NAMESPACE = "skyhook"


class CliError(Exception):
    """A failure to report on stderr as one line, with exit code 1."""


def operator_namespace(kube: Kube, warn: Callable[[str], None]) -> str:
    """Where `kubectl nodewright` finds the operator when not told: `nodewright`, else
    `skyhook`, else wherever a cluster-wide list finds it (saying so in both cases), else
    `nodewright`. A namespace, or a cluster-wide list, it may not read is passed over."""
    for namespace in ("nodewright", DEFAULT_NAMESPACE, ""):
        try:
            deployments = kube.list_deployments(namespace)
        except KubeError:
            continue
        found = next((d for d in deployments if looks_like_skyhook(d)), None)
        if found is not None:
            where = namespace or found.metadata.namespace
            if where != "nodewright":
                warn(f"using the operator in namespace {quote(where)} (pass -n to choose)")
            return str(where)
    return "nodewright"


@dataclass
class App:
    """The resolved global flags of one invocation and the client built from them.
    `namespace` "" (not given): found when first asked for (`operator_namespace`)."""

    connection: ConnectionFlags
    given_namespace: str = DEFAULT_NAMESPACE
    output: str = "table"
    verbose: bool = False
    dry_run: bool = False
    _kube: Kube | None = field(default=None, repr=False)

    @functools.cached_property
    def namespace(self) -> str:
        if self.given_namespace:
            return self.given_namespace
        return operator_namespace(self.kube, self.warn)

    @property
    def kube(self) -> Kube:
        if self._kube is None:
            try:
                self._kube = connect(self.connection)
            except KubeError as error:
                raise CliError(f"initializing kubernetes client: {error}") from None
        return self._kube

    @property
    def stdin(self) -> TextIO:
        return sys.stdin

    def say(self, text: str = "", end: str = "\n") -> None:
        click.echo(text + end, nl=False)

    def report_nodes(
        self, failures: Sequence[str], total: int, failed_as: str, succeeded: str
    ) -> None:
        """Per-node errors as upstream lists them (`Errors <failed_as> some nodes:`), then
        `succeeded` (formatted with the count) when any node succeeded. Upstream stops there
        with exit 0; we exit 1 when any node failed, so a script sees it."""
        if failures:
            self.say(f"\nErrors {failed_as} some nodes:")
            for failure in failures:
                self.say(f"  - {failure}")
        done = total - len(failures)
        if done:
            self.say("\n" + succeeded.format(done=done))

    def warn(self, text: str) -> None:
        click.echo(text, err=True)

    def note(self, text: str) -> None:
        """A warning shown only with -v/--verbose."""
        if self.verbose:
            self.warn(text)

    def emit(self, data: Any, names: Sequence[str] = ()) -> bool:
        """Print `data` as JSON or YAML, or `names` (`<kind>/<name>`, see `lists_names`) one a
        line, when asked for; False when a table is wanted."""
        if self.output == "json":
            self.say(output.to_json(data), end="")
        elif self.output == "yaml":
            self.say(output.to_yaml(data), end="")
        elif self.output == output.NAME:
            for name in names:
                self.say(name)
        else:
            return False
        return True

    def nothing(self, text: str) -> None:
        """Say there is nothing to list: on stdout, but on stderr with -o name, so a script
        reading names reads none (as kubectl says "No resources found")."""
        if self.output == output.NAME:
            self.warn(text)
        else:
            self.say(text)


# The commands whose -o name prints what they list; every other command refuses it.
_LISTS_NAMES: set[click.Command] = set()


def lists_names(command: C) -> C:
    """Mark a command that lists objects and prints them for -o name (App.emit's `names`)."""
    _LISTS_NAMES.add(command)
    return command


def current_app() -> App:
    """The App of the running command; validates the global flags first."""
    ctx = click.get_current_context()
    app = app_for(ctx)
    if app.output == output.NAME and ctx.command not in _LISTS_NAMES:
        accepted = "|".join(f for f in output.FORMATS if f != output.NAME)
        raise CliError(
            f"output format {quote(output.NAME)} is not supported by {quote(ctx.command_path)}: "
            f"it lists no objects (use one of {accepted})"
        )
    return app


def app_for(ctx: click.Context) -> App:
    """The App of the global flags given on the command line of `ctx` (so far, when
    completing it)."""
    given: dict[str, Any] = ctx.find_root().meta.get(FLAGS_KEY, {})
    fmt = str(given.get("output", "table")).lower()
    if fmt not in output.FORMATS:
        raise CliError(f"invalid output format {quote(fmt)}")
    # kubectl skyhook: `skyhook` unless told. kubectl nodewright looks for the operator, as
    # upstream's newer plugin does.
    namespace = str(given.get("namespace") or "").strip() or (
        DEFAULT_NAMESPACE if keys.GROUP == keys.SKYHOOK_GROUP else ""
    )
    connection = ConnectionFlags(
        kubeconfig=given.get("kubeconfig"),
        context=given.get("context"),
        cluster=given.get("cluster"),
        user=given.get("user"),
        server=given.get("server"),
        token=given.get("token"),
        username=given.get("username"),
        password=given.get("password"),
        certificate_authority=given.get("certificate_authority"),
        client_certificate=given.get("client_certificate"),
        client_key=given.get("client_key"),
        insecure_skip_tls_verify=bool(given.get("insecure_skip_tls_verify")),
        tls_server_name=given.get("tls_server_name"),
        impersonate=given.get("as_user"),
        impersonate_groups=tuple(given.get("as_group", ())),
        impersonate_uid=given.get("as_uid"),
        request_timeout=str(given.get("request_timeout", "0")),
        disable_compression=bool(given.get("disable_compression")),
    )
    return App(
        connection,
        given_namespace=namespace,
        output=fmt,
        verbose=bool(given.get("verbose")),
        dry_run=bool(given.get("dry_run")),
    )


def _remember(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    if param.name and ctx.get_parameter_source(param.name) is not ParameterSource.DEFAULT:
        ctx.find_root().meta.setdefault(FLAGS_KEY, {})[param.name] = value
    return value


def _flag(*names: str, **attrs: Any) -> Callable[[F], F]:
    return click.option(*names, expose_value=False, callback=_remember, **attrs)


def _files(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """The shell completes a path here (click's Path type answers so, without converting)."""
    return [CompletionItem(incomplete, type="file")]


def _formats(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    return [CompletionItem(name) for name in output.FORMATS if name.startswith(incomplete)]


GLOBAL_FLAGS: Sequence[Callable[[F], F]] = (
    _flag(
        "--kubeconfig",
        shell_complete=_files,
        help="Path to the kubeconfig file to use for CLI requests.",
    ),
    _flag("--context", help="The name of the kubeconfig context to use."),
    _flag("--cluster", help="The name of the kubeconfig cluster to use."),
    _flag("--user", help="The name of the kubeconfig user to use."),
    _flag("-s", "--server", help="The address and port of the Kubernetes API server."),
    _flag("--token", help="Bearer token for authentication to the API server."),
    _flag(
        "--certificate-authority",
        shell_complete=_files,
        help="Path to a cert file for the certificate authority.",
    ),
    _flag(
        "--client-certificate",
        shell_complete=_files,
        help="Path to a client certificate file for TLS.",
    ),
    _flag("--client-key", shell_complete=_files, help="Path to a client key file for TLS."),
    _flag(
        "--insecure-skip-tls-verify",
        is_flag=True,
        help="Do not check the server's certificate (insecure).",
    ),
    _flag("--tls-server-name", help="Server name to use for server certificate validation."),
    _flag("--as", "as_user", help="Username to impersonate for the operation."),
    _flag("--as-group", multiple=True, help="Group to impersonate; repeat for several."),
    _flag("--as-uid", help="UID to impersonate for the operation."),
    _flag(
        "--request-timeout",
        default="0",
        help="Time to wait for a single request (e.g. 1s, 2m); 0 waits forever.",
    ),
    _flag("--cache-dir", help="Accepted for kubectl compatibility; the plugin keeps no cache."),
    _flag(
        "--disable-compression",
        is_flag=True,
        help="If true, opt-out of response compression for all requests to the server.",
    ),
    _flag("--username", help="Username for basic authentication to the API server."),
    _flag("--password", help="Password for basic authentication to the API server."),
    _flag("-n", "--namespace", help="The operator's namespace (default skyhook)."),
    _flag(
        "-o",
        "--output",
        default="table",
        shell_complete=_formats,
        help="Output format. One of: table|json|yaml|wide|name",
    ),
    _flag("-v", "--verbose", is_flag=True, help="Enable verbose output"),
    _flag("--dry-run", is_flag=True, help="Preview changes without applying them"),
)


def global_flags(function: F) -> F:
    for add in reversed(GLOBAL_FLAGS):
        function = add(function)
    return function


def exactly_one(args: Sequence[str]) -> str:
    if len(args) != 1:
        raise click.UsageError(f"accepts 1 arg(s), received {len(args)}")
    return args[0]


def at_least_one(args: Sequence[str]) -> list[str]:
    if not args:
        raise click.UsageError("requires at least 1 arg(s), only received 0")
    return list(args)


def require(**flags: Any) -> None:
    """Fail like cobra's required flags: `required flag(s) "skyhook" not set`."""
    missing = sorted(name for name, value in flags.items() if not value)
    if missing:
        names = ", ".join(quote(name) for name in missing)
        raise click.UsageError(f"required flag(s) {names} not set")


def write(data: bytes) -> None:
    """Raw bytes to stdout (pod logs are passed through undecoded)."""
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
