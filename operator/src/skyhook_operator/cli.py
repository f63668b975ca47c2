"""`skyhook-operator run`: read the settings (SKYHOOK_* or upstream's env names; every problem
reported at once), log them, and run kopf cluster-wide in standalone mode (leader election,
when on, is our own Lease: kube/lease.py)."""

from __future__ import annotations

import asyncio
import cProfile
import gc
import logging
import os

import click
import kopf

from skyhook_operator import admission, handlers
from skyhook_operator.settings import SettingsError, load_settings

# Full collections of the oldest generation, at Python's default of one per ten younger ones,
# rescan every cached node and pod: measured on `benchmarks/planner.py` (1,000 nodes), they
# took a pass from p95 40 ms to 170 ms. The operator makes little cyclic garbage (the planner
# none), so the oldest generation is collected a hundred times less often.
GC_THRESHOLDS = (700, 10, 1000)


def tune_garbage_collector() -> None:
    """The collector's thresholds for a process that holds a fleet's objects for long."""
    gc.set_threshold(*GC_THRESHOLDS)


@click.group()
def main() -> None:
    """Skyhook operator: rolls packages across Kubernetes nodes."""


@main.command()
@click.option(
    "--kubeconfig",
    type=click.Path(exists=True, dir_okay=False),
    envvar="KUBECONFIG",
    help="kubeconfig to use; default: $KUBECONFIG, the in-cluster account, ~/.kube/config.",
)
@click.option("--verbose", is_flag=True, help="Log kopf's own debug output too.")
def run(kubeconfig: str | None, verbose: bool) -> None:
    """Run the operator until SIGTERM/SIGINT."""
    try:
        settings = load_settings()
    except SettingsError as error:
        raise click.ClickException(f"invalid settings:\n{error}") from error
    level = getattr(logging, settings.log_level.upper())
    kopf.configure(verbose=verbose, log_prefix=False)
    logging.getLogger().setLevel(logging.DEBUG if verbose else level)
    logging.getLogger("skyhook_operator").setLevel(level)
    if not verbose:  # kopf logs every handler call at INFO; ours are only pokes
        logging.getLogger("kopf").setLevel(logging.WARNING)
        logging.getLogger("urllib3").setLevel(logging.WARNING)
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)  # a line per webhook call
    logging.getLogger(__name__).debug("handlers registered from %s", handlers.__name__)
    if settings.enable_webhooks:
        admission.register()
    # The kubeconfig travels in the memo: the `kubernetes` package read $KUBECONFIG when it was
    # imported, so setting it now would reach neither kopf's login nor our client.
    memo = kopf.Memo(settings=settings, kubeconfig=kubeconfig)
    tune_garbage_collector()
    # SKYHOOK_PROFILE=<file>: a cProfile of the event loop's thread, written at a clean exit
    # (what the rollout benchmark uses to say where the operator's time goes).
    profile_path = os.environ.get("SKYHOOK_PROFILE")
    profiler = cProfile.Profile() if profile_path else None
    if profiler is not None:
        profiler.enable()
    try:
        asyncio.run(kopf.operator(clusterwide=True, standalone=True, memo=memo))
    finally:
        if profiler is not None and profile_path:
            profiler.disable()
            profiler.dump_stats(profile_path)
