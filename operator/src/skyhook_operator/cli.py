"""`skyhook-operator run`: read the settings (SKYHOOK_* or upstream's env names; every problem
reported at once), set up logging and the collector, and run the operator (runtime.py) until
SIGTERM or SIGINT. A part that cannot start ends the process with 1 and says why."""

from __future__ import annotations

import asyncio
import cProfile
import gc
import logging
import os

import click

from skyhook_operator import runtime
from skyhook_operator.settings import SettingsError, load_settings

# Full collections of the oldest generation, at Python's default of one per ten younger ones,
# rescan every cached node and pod: measured on `benchmarks/planner.py` (1,000 nodes), they
# took a pass from p95 40 ms to 170 ms. The operator makes little cyclic garbage (the planner
# none), so the oldest generation is collected a hundred times less often.
GC_THRESHOLDS = (700, 10, 1000)

LOG_FORMAT = "[%(asctime)s] %(name)-20.20s [%(levelname)-8.8s] %(message)s"


def tune_garbage_collector() -> None:
    """The collector's thresholds for a process that holds a fleet's objects for long."""
    gc.set_threshold(*GC_THRESHOLDS)


def configure_logging(level: str, verbose: bool) -> None:
    """Ours at `level`, other libraries' from info up; `verbose`: ours and aiohttp's at
    debug. urllib3 (ORAS's registry calls) and aiohttp's access log (a line per webhook call)
    say only warnings unless verbose."""
    logging.basicConfig(format=LOG_FORMAT, level=logging.INFO, force=True)
    logging.getLogger("skyhook_operator").setLevel(
        logging.DEBUG if verbose else getattr(logging, level.upper())
    )
    if verbose:
        logging.getLogger("aiohttp").setLevel(logging.DEBUG)
    else:
        logging.getLogger("urllib3").setLevel(logging.WARNING)
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


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
@click.option("--verbose", is_flag=True, help="Log debug output, ours and aiohttp's.")
def run(kubeconfig: str | None, verbose: bool) -> None:
    """Run the operator until SIGTERM/SIGINT."""
    try:
        settings = load_settings()
    except SettingsError as error:
        raise click.ClickException(f"invalid settings:\n{error}") from error
    configure_logging(settings.log_level, verbose)
    tune_garbage_collector()
    # SKYHOOK_PROFILE=<file>: a cProfile of the event loop's thread, written at a clean exit
    # (what the rollout benchmark uses to say where the operator's time goes).
    profile_path = os.environ.get("SKYHOOK_PROFILE")
    profiler = cProfile.Profile() if profile_path else None
    if profiler is not None:
        profiler.enable()
    try:
        # The kubeconfig is passed on, not set in the environment: the `kubernetes` package
        # read $KUBECONFIG when it was imported.
        asyncio.run(runtime.main(settings, kubeconfig))
    except runtime.StartError as error:
        logging.getLogger(__name__).error("cannot start: %s", error)
        raise click.ClickException(str(error)) from error
    finally:
        if profiler is not None and profile_path:
            profiler.disable()
            profiler.dump_stats(profile_path)
