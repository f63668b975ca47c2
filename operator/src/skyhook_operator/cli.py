"""`skyhook-operator run`: read the settings (SKYHOOK_* or upstream's env names; every problem
reported at once), set up logging and the collector, and run the operator (runtime.py) until
SIGTERM or SIGINT. A part that cannot start ends the process with 1 and says why."""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import contextlib
import cProfile
import ctypes
import gc
import logging
import os
import signal
import sys
import threading
import tracemalloc
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

import click

from skyhook_operator import logs, runtime
from skyhook_operator.settings import SettingsError, load_settings

# Full collections of the oldest generation, at Python's default of one per ten younger ones,
# rescan every cached node and pod: measured on `benchmarks/planner.py` (1,000 nodes), they
# took a pass from p95 40 ms to 170 ms. The operator makes little cyclic garbage (the planner
# none), so the oldest generation is collected a hundred times less often.
GC_THRESHOLDS = (700, 10, 1000)

# asyncio gives every TLS connection a 256 KiB read buffer, allocated and zeroed when the
# connection opens, so resident for its life: with the watches, the writer's lanes, Events,
# the Lease and the apiserver's connections to the webhooks that is 20-50 connections, 5-12
# MiB. 16 KiB, one TLS record, reads a watch stream or a LIST page in more calls of the same
# loop iteration, for a sixteenth of the memory.
TLS_READ_BUFFER = 16 * 1024

# glibc serves a block of at least its mmap threshold from a mapping of its own, unmapped when
# freed; the threshold starts at 128 KiB but rises to the size of each such block freed, so
# after the first large Skyhook status (1.3 MiB of JSON at 5,000 nodes, decoded from each
# watch event) every block below that comes from its heaps, where the RSS it takes stays.
# Fixed at 1 MiB the peak RSS of a 5,000-node rollout was 167 MiB against 177-181, at the
# same CPU; at 128 KiB 162 MiB, but every fleet-sized dict of a pass then costs a mapping.
M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)
MMAP_THRESHOLD = 1 << 20


def tune_garbage_collector() -> None:
    """The collector's thresholds for a process that holds a fleet's objects for long."""
    gc.set_threshold(*GC_THRESHOLDS)


@contextlib.contextmanager
def profiled(
    cpu_path: str | None, memory_path: str | None, census_path: str | None = None
) -> Iterator[None]:
    """What the rollout benchmark uses to say where the operator's time and memory go:
    SKYHOOK_PROFILE=<file>, a cProfile of the event loop's thread; SKYHOOK_MEMORY_PROFILE=<file>,
    the allocations alive when traced memory peaked; SKYHOOK_MEMORY_CENSUS=<file>, the objects
    alive, by type (`write_census`). Each is written on SIGUSR1 (the benchmark sends it once
    the rollout is done), else at exit: writing the memory profile of a large fleet takes
    longer than the shutdown deadline leaves a stopping operator."""
    profiler = cProfile.Profile() if cpu_path else None
    peak = _PeakMemory() if memory_path else None
    written = False

    def write(*_: object) -> None:
        nonlocal written
        if written:
            return
        written = True
        if profiler is not None and cpu_path:
            profiler.disable()
            _written_whole(cpu_path, profiler.dump_stats)
        if peak is not None and memory_path:
            _written_whole(memory_path, peak.write)
        if census_path:
            _written_whole(census_path, write_census)

    if profiler is None and peak is None and not census_path:
        yield
        return
    previous = signal.signal(signal.SIGUSR1, write)
    if profiler is not None:
        profiler.enable()
    try:
        yield
    finally:
        write()
        signal.signal(signal.SIGUSR1, previous)


def write_census(path: str) -> None:
    """Every object reachable from those the collector tracks, each counted once, by type:
    how many and their bytes (`sys.getsizeof`, without the allocator's overhead). Taken in one
    walk when asked, with no cost before: tracemalloc's tracing slows a 5,000-node rollout
    past an hour."""
    seen: set[int] = set()
    counted: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    pending = gc.get_objects()
    seen.update((id(seen), id(counted), id(pending)))  # the census's own are not counted
    while pending:
        found = pending.pop()
        if id(found) in seen:
            continue
        seen.add(id(found))
        kind = type(found)
        entry = counted[f"{kind.__module__}.{kind.__qualname__}"]
        entry[0] += 1
        entry[1] += sys.getsizeof(found)
        pending.extend(gc.get_referents(found))
    total = sum(size for _, size in counted.values())
    lines = [f"{len(seen)} objects, {total / 2**20:.1f} MiB (sys.getsizeof), by type:"]
    for name, (count, size) in sorted(counted.items(), key=lambda item: -item[1][1])[:60]:
        lines.append(f"{size / 2**20:9.2f} MiB {count:9d}  {name}")
    Path(path).write_text("\n".join(lines) + "\n")


def _written_whole(path: str, write: Callable[[str], None]) -> None:
    """`write` to a file beside `path`, then renamed: a reader waiting for `path` never sees
    half of it."""
    partial = f"{path}.partial"
    write(partial)
    os.replace(partial, path)


class _PeakMemory:
    """tracemalloc, with a snapshot taken each time traced memory grows a tenth (and at least
    a MiB) past the last one: the first (the indexes just listed) and the one nearest the peak
    are kept, and what grew between them is written beside what the peak holds. A snapshot
    holds the interpreter while it is taken, seconds at 5,000 nodes: a fixed step would take
    one every few passes."""

    FRAMES = 8
    STEP = 1 << 20
    GROWTH = 1.1
    INTERVAL = 1.0

    def __init__(self) -> None:
        tracemalloc.start(self.FRAMES)
        self._first: tracemalloc.Snapshot | None = None
        self._peak: tracemalloc.Snapshot | None = None
        self._taken_at = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="memory-profile", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(self.INTERVAL):
            current, _ = tracemalloc.get_traced_memory()
            if current > max(self._taken_at + self.STEP, self._taken_at * self.GROWTH):
                self._peak, self._taken_at = self._take(), current
                self._first = self._first or self._peak

    @staticmethod
    def _take() -> tracemalloc.Snapshot:
        ours = tracemalloc.Filter(False, tracemalloc.__file__)
        return tracemalloc.take_snapshot().filter_traces([ours])

    def write(self, path: str) -> None:
        self._stop.set()
        self._thread.join()
        peak = self._peak or self._take()
        tracemalloc.stop()
        lines = [f"traced at the peak snapshot: {self._taken_at / 2**20:.1f} MiB", ""]
        lines += ["by file:", *map(str, peak.statistics("filename")[:30]), ""]
        lines += ["by line:", *map(str, peak.statistics("lineno")[:60]), ""]
        if self._first is not None and self._first is not peak:
            grown = peak.compare_to(self._first, "lineno")[:40]
            lines += ["grown since the first snapshot, by line:", *map(str, grown), ""]
        lines.append("by traceback:")
        for stat in peak.statistics("traceback")[:30]:
            lines.append(f"{stat.size / 2**20:.2f} MiB in {stat.count} blocks")
            lines += ["    " + line for line in stat.traceback.format(limit=self.FRAMES)]
        Path(path).write_text("\n".join(lines) + "\n")


def tune_malloc() -> None:
    """Fix glibc's mmap threshold (`MMAP_THRESHOLD`), unless the environment sets it
    (`MALLOC_MMAP_THRESHOLD_`) or the C library is not glibc."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the process's own symbols: the C library's
    except (OSError, AttributeError):
        return
    mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)


def tune_tls_buffers() -> None:
    """The read buffer of every TLS connection asyncio opens from now on (both ways: the API
    client's and the webhook and metrics servers')."""
    asyncio.sslproto.SSLProtocol.max_size = TLS_READ_BUFFER


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
    logs.configure(
        settings.log_level,
        encoder=settings.log_encoder,
        time_encoder=settings.log_time_encoder,
        stack_trace_level=settings.log_stack_trace_level,
        verbose=verbose,
    )
    tune_garbage_collector()
    tune_malloc()
    tune_tls_buffers()
    # The kubeconfig is passed on, not set in the environment: the `kubernetes` package
    # read $KUBECONFIG when it was imported.
    with profiled(
        os.environ.get("SKYHOOK_PROFILE"),
        os.environ.get("SKYHOOK_MEMORY_PROFILE"),
        os.environ.get("SKYHOOK_MEMORY_CENSUS"),
    ):
        try:
            asyncio.run(runtime.main(settings, kubeconfig))
        except runtime.StartError as error:
            logging.getLogger(__name__).error("cannot start: %s", error)
            raise click.ClickException(str(error)) from error
