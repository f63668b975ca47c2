"""A stage a user can debug: each attempt is a pod (restartPolicy Never) bounded by
stageTimeout; a failed stage is retried SKYHOOK_STAGE_RETRIES times, then parked erroring;
the first and the last failed pod stay for their logs, and hold nothing back; pausing stops
what runs."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from skyhook_planner.model.actions import STOP_DEADLINE_S, DeletePod, EmitEvent, StopPod
from skyhook_planner.sim.driver import SETTINGS, Driver, package, pod_stage
from skyhook_schemas import keys
from skyhook_schemas.nodestate import decode_entries

SEL = {"nodeSelectors": {"matchLabels": {"role": "gpu"}}}
LABELS = {"role": "gpu"}
NODE = "node-0000"


def stamp(d: Driver) -> str:
    return d.now.strftime("%Y-%m-%dT%H:%M:%SZ")


def restarts(d: Driver, key: str = "alpha|1.0.0") -> int:
    raw = d.sim.nodes[NODE]["metadata"]["annotations"][keys.node_state_key("scr")]
    return decode_entries(raw)[key].restarts


def attempt_of(pod: dict[str, Any]) -> int:
    return int(pod["metadata"]["annotations"].get(keys.ATTEMPT_ANNOTATION, "0"))


def live_pods(d: Driver) -> list[tuple[str, str]]:
    return [
        k
        for k, p in d.sim.pods.items()
        if p.get("status", {}).get("phase") not in {"Succeeded", "Failed"}
    ]


def fail_pending(
    d: Driver, *, deadline: bool = False, lost: bool = False, disrupted: bool = False
) -> list[str]:
    """Every pod that has not run yet fails (Never: the pod fails); returns their names."""
    names = []
    for key in d.pending_pods():
        d.sim.finish_pod(key, 1, at=stamp(d))
        status = d.sim.pods[key]["status"]
        if deadline:
            status["reason"] = "DeadlineExceeded"
            status["message"] = "Pod was active on the node longer than the specified deadline"
            status["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] = 137
        if lost:
            terminated = status["initContainerStatuses"][0]["state"]["terminated"]
            terminated.update(exitCode=255, reason="Unknown")
        if disrupted:  # evicted for node pressure: the step was killed, exit 137
            status["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] = 137
            status["conditions"] = [
                {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet"}
            ]
        names.append(key[1])
    return names


def fail_first_attempt_then_succeed(d: Driver) -> str:
    """The first stage pod fails (Never: the pod fails), every later one succeeds, one pass a
    second for 20 s; returns the failed pod's name."""
    while not d.pending_pods():
        d.step()  # cordons and drains first
    (failed,) = fail_pending(d)
    d.now += timedelta(seconds=1)
    for _ in range(20):
        d.step()
        for key in d.pending_pods():
            d.sim.finish_pod(key, 0, at=stamp(d))
        d.now += timedelta(seconds=1)
    return failed


def fail_every_attempt(d: Driver, **how: bool) -> list[str]:
    """Let each attempt fail, waiting out each backoff, until no new pod comes."""
    failed: list[str] = []
    for _ in range(30):
        result = d.step()
        if not d.pending_pods():
            if result.requeue_after is None or result.requeue_after > 60:
                return failed
            d.now += timedelta(seconds=result.requeue_after)
            continue
        failed += fail_pending(d, **how)
        d.now += timedelta(seconds=1)
    raise AssertionError("still retrying")


def events(d: Driver) -> list[EmitEvent]:
    return [a for p in d.plans for a in p.actions if isinstance(a, EmitEvent)]


def deleted(d: Driver) -> list[DeletePod]:
    return [a for p in d.plans for a in p.actions if isinstance(a, DeletePod)]


def failing(retries: int = 3, **package_fields: Any) -> Driver:
    d = Driver(1, LABELS, settings=replace(SETTINGS, stage_retries=retries))
    d.sim.add_skyhook("scr", {**SEL, "packages": {"alpha": package(**package_fields)}})
    return d


def test_a_failing_stage_gives_up_after_its_retries_and_stays_parked() -> None:
    d = failing(retries=3)
    failed = fail_every_attempt(d)
    assert len(failed) == 4  # the first attempt and 3 retries, each a pod of its own
    assert len(set(failed)) == 4
    assert d.entries("scr", NODE) == {"alpha|1.0.0": ("apply", "erroring")}
    assert restarts(d) == 4  # upstream's meaning: failed attempts
    assert d.node_status("scr", NODE) == "erroring"
    # Only the first and the last failed attempt stay, for their logs.
    kept = {p["metadata"]["name"]: attempt_of(p) for p in d.sim.pods.values()}
    assert kept == {failed[0]: 0, failed[-1]: 3}
    gave_up = [e for e in events(d) if "gave up" in e.message]
    assert {e.kind for e in gave_up} == {"Node", "Skyhook"}
    assert all(e.type == "Warning" for e in gave_up)
    message = gave_up[0].message
    assert "after 4 failed attempts" in message
    assert f"kubectl logs -n skyhook {failed[-1]} -c alpha-init" in message
    assert "kubectl skyhook package logs alpha --skyhook scr -n skyhook" in message
    # Parked: hours later, nothing new has started and nothing was written.
    d.now += timedelta(hours=3)
    again = d.step()
    assert not d.pending_pods()
    assert not [a for a in again.actions if not isinstance(a, EmitEvent)]


def test_the_node_reads_in_progress_until_its_stage_gives_up() -> None:
    """A failed attempt shows on the package's entry; the node turns erroring (its status, the
    Skyhook's) only when no retry is left."""
    d = failing(retries=1)
    d.step()
    fail_pending(d)
    d.step()
    assert d.entries("scr", NODE) == {"alpha|1.0.0": ("apply", "erroring")}
    assert d.node_status("scr", NODE) == "in_progress"
    assert d.status("scr")["status"] == "in_progress"
    fail_every_attempt(d)
    assert restarts(d) == 2
    assert d.node_status("scr", NODE) == "erroring"
    assert d.status("scr")["status"] == "erroring"


def test_no_retries_is_one_attempt() -> None:
    d = failing(retries=0)
    assert len(fail_every_attempt(d)) == 1
    assert d.entries("scr", NODE) == {"alpha|1.0.0": ("apply", "erroring")}
    assert restarts(d) == 1


def test_a_stage_past_its_timeout_is_a_failed_attempt() -> None:
    d = failing(retries=1, stageTimeout="5m")
    d.step()
    (pod,) = d.sim.pods.values()
    assert pod["spec"]["activeDeadlineSeconds"] == 300
    failed = fail_every_attempt(d, deadline=True)
    assert len(failed) == 2
    assert d.entries("scr", NODE) == {"alpha|1.0.0": ("apply", "erroring")}
    assert any("the last timed out (stageTimeout)" in e.message for e in events(d))


def test_a_pod_its_node_lost_spends_no_attempt() -> None:
    d = failing(retries=0)
    d.step()
    (lost,) = fail_pending(d, lost=True)
    d.step()
    assert ("skyhook", lost) not in d.sim.pods  # deleted: it tells nothing about the package
    assert restarts(d) == 0
    d.step()
    (again,) = d.sim.pods.values()
    assert again["metadata"]["name"] == lost  # the same attempt, again


def test_a_pod_the_cluster_disrupted_spends_no_attempt() -> None:
    """An eviction or a preemption kills the step with a non-zero exit, but the package did not
    fail: the same attempt runs again and the node stays in progress."""
    d = failing(retries=0)
    d.step()
    (disrupted,) = fail_pending(d, disrupted=True)
    d.step()
    assert ("skyhook", disrupted) not in d.sim.pods
    assert restarts(d) == 0
    assert d.node_status("scr", NODE) == "in_progress"
    (delete,) = [a for a in deleted(d) if a.name == disrupted]
    assert "DisruptionTarget" in delete.reason
    d.step()
    (again,) = d.sim.pods.values()
    assert again["metadata"]["name"] == disrupted


def test_a_failed_attempt_is_counted_once_and_not_relearned() -> None:
    d = failing(retries=3)
    d.step()
    fail_pending(d)
    d.step()  # learned: erroring, the backoff starts
    assert restarts(d) == 1
    quiet = d.step()
    assert not [a for a in quiet.actions if not isinstance(a, EmitEvent)]
    assert not [e for e in quiet.actions if isinstance(e, EmitEvent) and e.action == "JobFailed"]
    assert restarts(d) == 1


def test_every_event_of_a_stage_that_fails_then_completes_has_a_reason_and_an_action() -> None:
    """As upstream v0.18+ names them: a failed attempt is `State`/`JobFailed` (a Warning of its
    own), a completed stage `State`/`JobComplete`, the node's completion `MarkComplete`."""
    d = failing(retries=3)
    d.step()
    fail_pending(d)
    d.run(max_steps=60)
    said = [(e.kind, e.reason, e.action, e.type) for e in events(d)]
    assert all(action for _, _, action, _ in said), said
    assert ("Node", "State", "JobFailed", "Warning") in said
    assert said.index(("Node", "State", "JobFailed", "Warning")) < said.index(
        ("Node", "State", "JobComplete", "Normal")
    )
    assert ("Node", "State", "MarkComplete", "Normal") in said
    assert ("Node", "Apply", "StartStage", "Normal") in said
    assert ("Skyhook", "State", "Transition", "Normal") in said
    failed = next(e for e in events(d) if e.action == "JobFailed")
    assert failed.message.startswith("Package [alpha:1.0.0] stage apply failed on [skyhook:scr]")
    assert "attempt 1 of 4 failed (pod " in failed.message


def test_editing_the_package_unparks_the_stage_and_clears_the_kept_pods() -> None:
    d = failing(retries=0)
    (failed,) = fail_every_attempt(d)
    d.sim.skyhooks["scr"]["spec"]["packages"]["alpha"]["env"] = [{"name": "FIX", "value": "1"}]
    d.step()
    assert ("skyhook", failed) not in d.sim.pods
    d.run()
    assert d.entries("scr", NODE) == {"alpha|1.0.0": ("config", "complete")}
    assert [s for _, _, s in d.stages_run()] == ["apply", "apply", "config"]


def test_a_rerun_or_reset_starts_the_stage_over() -> None:
    """`kubectl skyhook package rerun` sets the entry back in progress with no failed
    attempts (and deletes the kept pods); `reset` removes the entry."""
    for rerun in (True, False):
        d = failing(retries=0)
        (failed,) = fail_every_attempt(d)
        node = d.sim.nodes[NODE]["metadata"]["annotations"]
        state_key = keys.node_state_key("scr")
        if rerun:
            entries = decode_entries(node[state_key])
            entry = entries["alpha|1.0.0"]
            node[state_key] = node[state_key].replace(
                f'"state":"erroring","restarts":{entry.restarts}',
                '"state":"in_progress","restarts":0',
            )
            del d.sim.pods[("skyhook", failed)]
        else:
            del node[state_key]
        d.step()
        d.step()
        (again,) = live_pods(d)
        assert again[1] == failed  # the first attempt's name: a new round
        assert restarts(d) == 0


def test_a_kept_failed_pod_holds_nothing_back() -> None:
    """The stage completes on a retry; its failed pod stays, yet the next stages, an
    interrupt and the budget all go on as if it were gone."""
    d = Driver(1, LABELS)
    d.sim.add_skyhook(
        "scr",
        {
            **SEL,
            "packages": {"alpha": package(interrupt={"type": "service", "services": ["cron"]})},
        },
    )
    failed = fail_first_attempt_then_succeed(d)
    assert d.entries("scr", NODE) == {"alpha|1.0.0": ("post-interrupt", "complete")}
    assert ("skyhook", failed) in d.sim.pods
    assert [s for _, _, s in d.stages_run()] == [
        "apply",
        "apply",
        "config",
        "interrupt",
        "post-interrupt",
    ]
    assert d.node_status("scr", NODE) == "complete"


def test_a_kept_failed_pod_goes_after_its_retention() -> None:
    d = failing(retries=0)
    (failed,) = fail_every_attempt(d)
    d.now += timedelta(seconds=SETTINGS.pod_ttl_failed_s - 60)
    d.step()
    assert ("skyhook", failed) in d.sim.pods
    d.now += timedelta(seconds=61)
    d.step()
    assert ("skyhook", failed) not in d.sim.pods
    assert any(a.reason == "kept for its logs long enough" for a in deleted(d))


def test_each_kept_pod_goes_when_its_own_retention_ends() -> None:
    """A node keeps a failed attempt (kept a day) and its succeeded stages (kept 20 s): the
    succeeded ones go 20 s after they finished, whichever of the node's pods is first."""
    d = Driver(1, LABELS, settings=replace(SETTINGS, pod_ttl_succeeded_s=20.0))
    d.sim.add_skyhook("scr", {**SEL, "packages": {"alpha": package()}})
    failed = fail_first_attempt_then_succeed(d)
    assert d.node_status("scr", NODE) == "complete"
    kept = sorted(name for _, name in d.sim.pods)
    assert len(kept) == 3 and failed in kept  # the failed apply, the apply and config
    d.now += timedelta(seconds=21)
    d.step()
    assert sorted(name for _, name in d.sim.pods) == [failed]


def test_pause_stops_the_running_stage_and_resume_runs_it_again() -> None:
    d = failing(retries=3)
    d.step()
    (running,) = d.pending_pods()
    d.sim.skyhooks["scr"]["metadata"].setdefault("annotations", {})[keys.PAUSE_ANNOTATION] = "true"
    paused = d.step()
    assert [a.name for a in paused.actions if isinstance(a, DeletePod)] == [running[1]]
    assert running not in d.sim.pods
    assert any(
        isinstance(a, EmitEvent) and a.reason == "Paused" and a.kind == "Skyhook"
        for a in paused.actions
    )
    assert d.entries("scr", NODE) == {"alpha|1.0.0": ("apply", "in_progress")}
    d.now += timedelta(minutes=5)
    d.step()
    assert not d.sim.pods, "nothing runs while paused"
    del d.sim.skyhooks["scr"]["metadata"]["annotations"][keys.PAUSE_ANNOTATION]
    d.step()
    (resumed,) = d.pending_pods()
    assert resumed == running  # the same attempt from its beginning: no attempt spent
    assert restarts(d) == 0
    d.run()
    assert d.entries("scr", NODE) == {"alpha|1.0.0": ("config", "complete")}
    assert [s for _, _, s in d.stages_run()] == ["apply", "apply", "config"]
    assert all(pod_stage(p)[2] for p in d.sim.created_pods)


def crash_looping_interrupt(kind: dict[str, Any], restart_count: int) -> tuple[Driver, str]:
    """A node at its interrupt whose interrupt container has failed `restart_count` + 1
    times (the kubelet backs off before the next run)."""
    d = Driver(1, LABELS)
    d.sim.add_skyhook("scr", {**SEL, "packages": {"alpha": package(interrupt=kind)}})
    for _ in range(20):
        d.step()
        pods = [k for k, p in d.sim.pods.items() if keys.INTERRUPT_LABEL in p["metadata"]["labels"]]
        if pods:
            break
        for key in d.pending_pods():
            d.sim.finish_pod(key, 0, at=stamp(d))
        d.now += timedelta(seconds=1)
    (key,) = pods
    d.sim.pods[key]["status"] = {
        "phase": "Pending",
        "initContainerStatuses": [
            {
                "name": "interrupt",
                "restartCount": restart_count,
                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            }
        ],
    }
    return d, key[1]


def test_a_service_interrupt_past_its_restart_limit_is_stopped_kept_and_not_started_again() -> None:
    """At its restart limit the interrupt pod is stopped where it is (its deadline lowered, so
    the kubelet fails it) and kept for its logs, marked with how many times it failed; the
    stage stays erroring and nothing interrupts the node again until a rerun."""
    d, name = crash_looping_interrupt({"type": "service", "services": ["cron"]}, 3)
    result = d.step()
    (stop,) = [a for a in result.actions if isinstance(a, StopPod)]
    assert (stop.name, stop.annotations) == (name, {keys.RESTART_LIMIT_ANNOTATION: "4"})
    assert not [a for a in result.actions if isinstance(a, DeletePod)]
    pod = d.sim.pods[("skyhook", name)]
    assert pod["spec"]["activeDeadlineSeconds"] == STOP_DEADLINE_S
    assert (pod["status"]["phase"], pod["status"]["reason"]) == ("Failed", "DeadlineExceeded")
    assert d.entries("scr", NODE) == {"alpha|1.0.0": ("interrupt", "erroring")}
    assert restarts(d) == 4
    assert d.node_status("scr", NODE) == "erroring"
    found = [a for a in result.actions if isinstance(a, EmitEvent) and a.reason == "Interrupt"]
    assert {(e.kind, e.type) for e in found} == {("Node", "Warning"), ("Skyhook", "Warning")}
    assert "package [alpha:1.0.0]" in found[0].message
    assert "failed 4 times" in found[0].message
    assert f"kubectl logs -n skyhook {name} -c interrupt" in found[0].message
    d.now += timedelta(hours=1)
    for _ in range(3):
        later = d.step()
        touched = [a.name for a in later.actions if isinstance(a, StopPod | DeletePod)]
        assert name not in touched
        assert not [a for a in later.actions if isinstance(a, EmitEvent) and "failed" in a.message]
    interrupts = [
        k for k, p in d.sim.pods.items() if keys.INTERRUPT_LABEL in p["metadata"]["labels"]
    ]
    assert interrupts == [("skyhook", name)], "kept, and no new interrupt pod"
    assert restarts(d) == 4
    # A rerun from the interrupt stage: the stopped pod goes and the interrupt runs again.
    node = d.sim.nodes[NODE]["metadata"]["annotations"]
    state_key = keys.node_state_key("scr")
    node[state_key] = node[state_key].replace('"state":"erroring"', '"state":"in_progress"')
    rerun = d.step()
    assert [a.name for a in rerun.actions if isinstance(a, DeletePod)] == [name]
    assert not [a for a in rerun.actions if isinstance(a, EmitEvent) and "timed out" in a.message]
    d.step()
    (again,) = live_pods(d)
    assert again[1] == name


def test_an_interrupt_stopped_at_its_restart_limit_is_stopped_once() -> None:
    """While the kubelet has yet to fail the stopped pod, its container may fail once more:
    the pod is not stopped again and no second Warning goes out."""
    d, name = crash_looping_interrupt({"type": "noop"}, 3)
    first = d.step()
    assert [a.name for a in first.actions if isinstance(a, StopPod)] == [name]
    pod = d.sim.pods[("skyhook", name)]
    assert pod["metadata"]["annotations"][keys.RESTART_LIMIT_ANNOTATION] == "4"
    # The kubelet has not failed it yet, and its container failed once more.
    pod["status"] = {
        "phase": "Pending",
        "initContainerStatuses": [
            {
                "name": "interrupt",
                "restartCount": 4,
                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            }
        ],
    }
    again = d.step()
    assert not [a for a in again.actions if isinstance(a, StopPod | DeletePod)]
    assert not [a for a in again.actions if isinstance(a, EmitEvent) and a.reason == "Interrupt"]
    assert restarts(d) == 4


def test_an_interrupt_within_its_restart_limit_keeps_restarting() -> None:
    d, name = crash_looping_interrupt({"type": "noop"}, 2)
    d.step()
    assert ("skyhook", name) in d.sim.pods
    assert d.entries("scr", NODE) == {"alpha|1.0.0": ("interrupt", "erroring")}
    assert restarts(d) == 3  # its failed runs: two restarts and the run that just failed
    assert d.node_status("scr", NODE) == "in_progress"  # one more run is allowed


def test_a_reboot_interrupts_restarts_are_never_counted() -> None:
    d, name = crash_looping_interrupt({"type": "reboot"}, 10)
    d.step()
    assert ("skyhook", name) in d.sim.pods
    assert d.entries("scr", NODE) == {"alpha|1.0.0": ("interrupt", "erroring")}
    assert d.node_status("scr", NODE) == "in_progress"  # until its stageTimeout or deadline
    assert not any(
        isinstance(a, EmitEvent) and a.reason == "Interrupt" and "failed" in a.message
        for p in d.plans
        for a in p.actions
    )


def test_editing_the_package_while_a_retry_runs_starts_a_new_round() -> None:
    d = failing(retries=3)
    d.step()
    (first,) = fail_pending(d)
    d.now += timedelta(seconds=5)
    d.step()
    d.step()
    (retry,) = live_pods(d)
    assert attempt_of(d.sim.pods[retry]) == 1
    d.sim.skyhooks["scr"]["spec"]["packages"]["alpha"]["env"] = [{"name": "FIX", "value": "1"}]
    d.step()  # the running retry goes, and the kept failure of the old spec with it
    assert retry not in d.sim.pods
    assert ("skyhook", first) not in d.sim.pods
    assert restarts(d) == 0
    d.step()
    (again,) = live_pods(d)
    assert again[1] == first  # the first attempt's name: a new round


def test_an_interrupt_past_its_stage_timeout_stays_erroring_with_its_pod_kept() -> None:
    """stageTimeout bounds the whole interrupt: the kubelet fails its pod, which stays for its
    logs while the stage is erroring; nothing interrupts the node again until a rerun."""
    d, name = crash_looping_interrupt({"type": "reboot"}, 0)
    pod = d.sim.pods[("skyhook", name)]
    assert pod["spec"]["activeDeadlineSeconds"] == 3600
    pod["status"] = {
        "phase": "Failed",
        "reason": "DeadlineExceeded",
        "initContainerStatuses": [
            {
                "name": "interrupt",
                "restartCount": 0,
                "state": {"terminated": {"exitCode": 137, "finishedAt": stamp(d)}},
            }
        ],
    }
    result = d.step()
    assert d.entries("scr", NODE) == {"alpha|1.0.0": ("interrupt", "erroring")}
    assert d.node_status("scr", NODE) == "erroring"
    found = [a for a in result.actions if isinstance(a, EmitEvent) and a.reason == "Interrupt"]
    assert {e.kind for e in found} == {"Node", "Skyhook"}
    assert f"kubectl logs -n skyhook {name} -c interrupt" in found[0].message
    d.now += timedelta(minutes=30)
    for _ in range(3):
        d.step()
    interrupts = [
        k for k, p in d.sim.pods.items() if keys.INTERRUPT_LABEL in p["metadata"]["labels"]
    ]
    assert interrupts == [("skyhook", name)], "kept, and no new interrupt pod"
    # A rerun from the interrupt stage (the CLI deletes the kept pod): it runs again.
    node = d.sim.nodes[NODE]["metadata"]["annotations"]
    state_key = keys.node_state_key("scr")
    node[state_key] = node[state_key].replace('"state":"erroring"', '"state":"in_progress"')
    del d.sim.pods[("skyhook", name)]
    d.step()
    (again,) = live_pods(d)
    assert again[1] == name


# --- finished work kept for its logs ------------------------------------------------------------


def finish_pending(d: Driver) -> None:
    for key in d.pending_pods():
        d.sim.finish_pod(key, 0, at=stamp(d))


def phases(d: Driver) -> dict[str, str]:
    return {key[1]: p["status"]["phase"] for key, p in d.sim.pods.items()}


def test_a_succeeded_stage_pod_stays_for_its_logs_then_goes() -> None:
    """Each succeeded stage pod stays, Succeeded, for SKYHOOK_POD_TTL_SUCCEEDED: it holds
    nothing back (the node completes) and goes once its retention is over."""
    d = Driver(1, LABELS, settings=replace(SETTINGS, pod_ttl_succeeded_s=600))
    d.sim.add_skyhook("scr", {**SEL, "packages": {"alpha": package()}})
    for _ in range(6):
        d.step()
        finish_pending(d)
    assert d.node_status("scr", NODE) == "complete"
    assert [s for _, _, s in d.stages_run()] == ["apply", "config"]
    assert sorted(phases(d).values()) == ["Succeeded", "Succeeded"]
    assert not [a for p in d.plans for a in p.actions if isinstance(a, DeletePod)]
    result = d.step()
    assert result.requeue_after is not None and result.requeue_after <= 600
    d.now += timedelta(seconds=599)
    d.step()
    assert len(d.sim.pods) == 2, "kept until its retention is over"
    d.now += timedelta(seconds=2)
    gone = d.step()
    assert not d.sim.pods
    reasons = {a.reason for a in gone.actions if isinstance(a, DeletePod)}
    assert reasons == {"kept for its logs long enough"}
    assert d.node_status("scr", NODE) == "complete"


def test_a_config_edit_runs_config_again_never_taking_the_kept_pods_result() -> None:
    """The kept config pod has the name the next config run needs: it goes first, and the
    stage completes only from the new pod's result."""
    d = Driver(1, LABELS)
    d.sim.add_skyhook("scr", {**SEL, "packages": {"alpha": package(configMap={"a.conf": "1"})}})
    for _ in range(6):
        d.step()
        finish_pending(d)
    assert d.entries("scr", NODE) == {"alpha|1.0.0": ("config", "complete")}
    (old_config,) = [k for k, p in d.sim.pods.items() if pod_stage(p)[2] == "config"]
    d.sim.skyhooks["scr"]["spec"]["packages"]["alpha"]["configMap"] = {"a.conf": "2"}
    for _ in range(5):
        d.step()  # the new config pod never finishes: the stage must stay in progress
    assert d.entries("scr", NODE) == {"alpha|1.0.0": ("config", "in_progress")}
    configs = [p for p in d.sim.created_pods if pod_stage(p)[2] == "config"]
    assert len(configs) == 2, "config runs again, in a pod of its own"
    assert d.pending_pods() == [old_config], "the same name, a new pod that has not run"
    finish_pending(d)
    d.step()
    assert d.entries("scr", NODE) == {"alpha|1.0.0": ("config", "complete")}


def test_a_kept_pod_goes_when_its_stage_is_no_longer_recorded_done() -> None:
    """A reset (the node's state removed) leaves nothing recorded: the kept pods go at once,
    and the stages run again in new pods."""
    d = Driver(1, LABELS)
    d.sim.add_skyhook("scr", {**SEL, "packages": {"alpha": package()}})
    for _ in range(6):
        d.step()
        finish_pending(d)
    assert len(d.sim.pods) == 2
    del d.sim.nodes[NODE]["metadata"]["annotations"][keys.node_state_key("scr")]
    d.step()
    reasons = {a.reason for a in d.plans[-1].actions if isinstance(a, DeletePod)}
    assert reasons == {"no matching package entry (stale pod)"}
    for _ in range(6):
        d.step()
        finish_pending(d)
    assert [s for _, _, s in d.stages_run()] == ["apply", "config", "apply", "config"]
    assert d.node_status("scr", NODE) == "complete"


def test_the_next_stage_starts_as_soon_as_the_steps_passed() -> None:
    """The pod's `done` container may not have ended yet (the pod still Running): its steps
    passed, so it holds nothing back and the next stage starts in the same pass."""
    d = Driver(1, LABELS)
    d.sim.add_skyhook("scr", {**SEL, "packages": {"alpha": package()}})
    d.step()
    (key,) = d.pending_pods()
    d.sim.finish_pod(key, 0, at=stamp(d))
    d.sim.pods[key]["status"]["phase"] = "Running"  # `done` still to end
    d.step()
    assert [s for _, _, s in d.stages_run()] == ["apply", "config"]
    assert d.entries("scr", NODE) == {"alpha|1.0.0": ("config", "in_progress")}
