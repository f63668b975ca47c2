"""A pass frees what it built for each node as it goes. The operator runs the cyclic garbage
collector rarely (it tunes its thresholds for a large heap), so a reference cycle made per node
run would keep every run's working state alive until a collection: tens of MiB at 1,000 nodes."""

from __future__ import annotations

import gc
from datetime import timedelta

from skyhook_planner.sim.driver import Driver, package

SELECTOR = {"nodeSelectors": {"matchLabels": {"role": "gpu"}}}
# A reboot: each node's run goes through the cordon, the drain and the interrupt.
PACKAGES = {
    "kernel": package(interrupt={"type": "reboot"}),
    "tools": package(version="2.0.0"),
}


def test_passes_through_a_rollout_with_interrupts_leave_no_reference_cycles() -> None:
    driver = Driver(20, {"role": "gpu"})
    driver.sim.add_skyhook("scr", {**SELECTOR, "packages": PACKAGES})
    driver.step()  # first pass: imports, caches and decoders settle
    gc.collect()
    gc.disable()
    try:
        for _ in range(12):
            driver.step()
            for key in driver.pending_pods():
                driver.sim.finish_pod(key, 0, at=driver.now.strftime("%Y-%m-%dT%H:%M:%SZ"))
            driver.now += timedelta(seconds=5)
        left_for_the_collector = gc.collect()
    finally:
        gc.enable()
    assert left_for_the_collector == 0
