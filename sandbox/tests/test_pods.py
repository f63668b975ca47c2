"""Pods on simulated nodes behave as on a kubelet: init order, exit codes, files on the host,
restarts, volumes, env, images, logs. These run against the real apiserver."""

from __future__ import annotations

import base64
import itertools
import stat
import time

from helpers import NAMESPACE, pod_dict, pod_manifest, shell, terminated, wait_for, wait_phase
from kubernetes import watch

HOST = [{"name": "host", "hostPath": {"path": "/"}}]
HOST_MOUNT = [{"name": "host", "mountPath": "/root"}]


def test_init_containers_then_container_succeed_and_write_the_host_root(
    api, sandbox, sandbox_nodes
):
    (node,) = sandbox_nodes(1, labels={"role": "worker"})
    manifest = pod_manifest(
        "two-inits",
        node,
        restartPolicy="Never",
        volumes=[*HOST, {"name": "scratch", "emptyDir": {}}],
        initContainers=[
            shell("first", "echo first > /root/order.txt; date +%s%N > /scratch/t1",
                  volumeMounts=[*HOST_MOUNT, {"name": "scratch", "mountPath": "/scratch"}]),
            shell("second", "[ -f /scratch/t1 ] && echo second >> /root/order.txt",
                  volumeMounts=[*HOST_MOUNT, {"name": "scratch", "mountPath": "/scratch"}]),
        ],
        containers=[shell("main", "chroot /root /bin/sh -c 'echo main > /main.txt'",
                          volumeMounts=HOST_MOUNT)],
    )  # fmt: skip
    api.create_namespaced_pod(NAMESPACE, manifest)
    pod = wait_phase(api, "two-inits", ("Succeeded", "Failed"))
    status = pod["status"]
    assert status["phase"] == "Succeeded"
    assert [terminated(s)["exitCode"] for s in status["initContainerStatuses"]] == [0, 0]
    assert terminated(status["containerStatuses"][0])["exitCode"] == 0
    assert terminated(status["containerStatuses"][0])["reason"] == "Completed"
    first = terminated(status["initContainerStatuses"][0])
    assert first["startedAt"] <= terminated(status["initContainerStatuses"][1])["startedAt"]
    upper = sandbox.host_root_upper(node)
    assert (upper / "order.txt").read_text() == "first\nsecond\n"
    assert (upper / "main.txt").read_text() == "main\n"
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions["Initialized"] == "True"
    assert conditions["PodScheduled"] == "True"


def test_failing_command_fails_the_pod_with_its_exit_code(api, sandbox_nodes):
    (node,) = sandbox_nodes()
    api.create_namespaced_pod(
        NAMESPACE,
        pod_manifest(
            "fails", node, restartPolicy="Never",
            initContainers=[shell("ok", "true"), shell("bad", "echo broken >&2; exit 7")],
            containers=[shell("never", "true")],
        ),
    )  # fmt: skip
    status = wait_phase(api, "fails", ("Succeeded", "Failed"))["status"]
    assert status["phase"] == "Failed"
    assert terminated(status["initContainerStatuses"][1])["exitCode"] == 7
    assert terminated(status["initContainerStatuses"][1])["reason"] == "Error"
    assert "waiting" in status["containerStatuses"][0]["state"]  # never started


def test_main_container_failure_reports_exit_code(api, sandbox_nodes):
    (node,) = sandbox_nodes()
    api.create_namespaced_pod(
        NAMESPACE,
        pod_manifest("main-fails", node, restartPolicy="Never", containers=[shell("c", "exit 42")]),
    )
    status = wait_phase(api, "main-fails", ("Succeeded", "Failed"))["status"]
    assert status["phase"] == "Failed"
    assert terminated(status["containerStatuses"][0])["exitCode"] == 42


def test_on_failure_restarts_a_failed_init_container_with_backoff(api, sandbox_nodes):
    (node,) = sandbox_nodes()
    # Fails on its first run only: the emptyDir keeps the marker across restarts, as on a kubelet.
    script = "if [ -f /scratch/ran ]; then exit 0; fi; touch /scratch/ran; exit 3"
    api.create_namespaced_pod(
        NAMESPACE,
        pod_manifest(
            "retries", node, restartPolicy="OnFailure",
            volumes=[{"name": "scratch", "emptyDir": {}}],
            initContainers=[shell("flaky", script, volumeMounts=[{"name": "scratch", "mountPath": "/scratch"}])],
            containers=[shell("main", "true")],
        ),
    )  # fmt: skip
    status = wait_phase(api, "retries", ("Succeeded",), timeout=30)["status"]
    flaky = status["initContainerStatuses"][0]
    assert flaky["restartCount"] == 1
    assert flaky["lastState"]["terminated"]["exitCode"] == 3
    assert terminated(flaky)["exitCode"] == 0


def test_crash_loop_is_reported_while_waiting(api, sandbox_nodes):
    (node,) = sandbox_nodes()
    api.create_namespaced_pod(
        NAMESPACE,
        pod_manifest("loops", node, restartPolicy="OnFailure",
                     initContainers=[shell("always-fails", "exit 1")], containers=[shell("c", "true")]),
    )  # fmt: skip

    def looping() -> bool:
        init = (pod_dict(api, "loops")["status"].get("initContainerStatuses") or [{}])[0]
        return init.get("restartCount", 0) >= 2 and "waiting" in init.get("state", {})

    wait_for(looping, 30, "restartCount >= 2")
    init = pod_dict(api, "loops")["status"]["initContainerStatuses"][0]
    assert init["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert pod_dict(api, "loops")["status"]["phase"] == "Pending"


def test_env_volumes_and_command_expansion(api, sandbox, sandbox_nodes):
    (node,) = sandbox_nodes()
    api.create_namespaced_config_map(
        NAMESPACE, {"metadata": {"name": "settings"}, "data": {"mode": "fast", "extra.conf": "x=1"}}
    )
    secret = base64.b64encode(b"s3cret").decode()
    api.create_namespaced_secret(
        NAMESPACE, {"metadata": {"name": "creds"}, "data": {"token": secret}}
    )
    script = (
        "echo $(GREETING) > /out/args; echo $MODE $TOKEN $NODE $POD_NAME > /out/env; "
        "pwd > /out/pwd; cat /cfg/renamed.conf > /out/cfg; stat -c %a /cfg/renamed.conf > /out/mode; "
        "cat /sec/token > /out/secret; echo '$$(GREETING)' > /out/escaped"
    )
    env = [
        {"name": "GREETING", "value": "hello"},
        {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "mode"}}},
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    ]
    mounts = [
        {"name": "host", "mountPath": "/out", "subPath": "results"},
        {"name": "cfg", "mountPath": "/cfg"},
        {"name": "sec", "mountPath": "/sec", "readOnly": True},
    ]
    api.create_namespaced_pod(
        NAMESPACE,
        pod_manifest(
            "env-volumes", node, restartPolicy="Never",
            volumes=[
                {"name": "host", "hostPath": {"path": "/", "type": "Directory"}},
                {"name": "cfg", "configMap": {"name": "settings", "defaultMode": 0o600,
                                              "items": [{"key": "extra.conf", "path": "renamed.conf"}]}},
                {"name": "sec", "secret": {"secretName": "creds"}},
            ],
            containers=[shell("c", script, env=env, volumeMounts=mounts, workingDir="/tmp/work")],
        ),
    )  # fmt: skip
    try:
        assert (
            wait_phase(api, "env-volumes", ("Succeeded", "Failed"))["status"]["phase"]
            == "Succeeded"
        )
    finally:
        api.delete_namespaced_config_map("settings", NAMESPACE)
        api.delete_namespaced_secret("creds", NAMESPACE)
    results = sandbox.host_root_upper(node) / "results"
    assert (results / "args").read_text() == "hello\n"
    assert (results / "env").read_text() == f"fast s3cret {node} env-volumes\n"
    assert (results / "pwd").read_text() == "/tmp/work\n"
    assert (results / "cfg").read_text() == "x=1"
    assert (results / "mode").read_text() == "600\n"
    assert (results / "secret").read_text() == "s3cret"
    assert (results / "escaped").read_text() == "$(GREETING)\n"


def test_unknown_image_waits_with_err_image_pull(api, sandbox_nodes):
    (node,) = sandbox_nodes()
    api.create_namespaced_pod(
        NAMESPACE,
        pod_manifest("no-image", node, containers=[{"name": "c", "image": "example.com/nope:1"}]),
    )

    def waiting_reason() -> str | None:
        statuses = pod_dict(api, "no-image")["status"].get("containerStatuses") or [{}]
        return statuses[0].get("state", {}).get("waiting", {}).get("reason")

    reason = wait_for(
        lambda: waiting_reason() in ("ErrImagePull", "ImagePullBackOff") and waiting_reason(), 20
    )
    assert reason in ("ErrImagePull", "ImagePullBackOff")
    message = pod_dict(api, "no-image")["status"]["containerStatuses"][0]["state"]["waiting"][
        "message"
    ]
    assert "example.com/nope:1" in message
    assert pod_dict(api, "no-image")["status"]["phase"] == "Pending"


def test_logs_are_served_through_the_apiserver(api, sandbox_nodes):
    (node,) = sandbox_nodes()
    api.create_namespaced_pod(
        NAMESPACE,
        pod_manifest(
            "talks",
            node,
            restartPolicy="Never",
            containers=[shell("c", "echo line-one; echo line-two")],
        ),
    )
    wait_phase(api, "talks", ("Succeeded",))
    assert api.read_namespaced_pod_log("talks", NAMESPACE, container="c") == "line-one\nline-two\n"
    assert (
        api.read_namespaced_pod_log("talks", NAMESPACE, container="c", tail_lines=1) == "line-two\n"
    )


def test_pause_and_agentless_images(api, sandbox_nodes):
    (node,) = sandbox_nodes()
    agentless = {"name": "agentless", "image": "ghcr.io/nvidia/skyhook/agentless:6.2.0",
                 "args": ["apply", "/root", "/x"],
                 "env": [{"name": "SLEEP_LEN", "value": "0"}, {"name": "EXIT_CODE", "value": "5"}]}  # fmt: skip
    api.create_namespaced_pod(
        NAMESPACE,
        pod_manifest("images", node, restartPolicy="Never", initContainers=[agentless],
                     containers=[{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]),
    )  # fmt: skip
    status = wait_phase(api, "images", ("Failed",))["status"]
    assert terminated(status["initContainerStatuses"][0])["exitCode"] == 5
    assert "agentless: apply /root /x" in api.read_namespaced_pod_log(
        "images", NAMESPACE, container="agentless"
    )
    started = time.monotonic()
    api.create_namespaced_pod(
        NAMESPACE,
        pod_manifest(
            "pauses", node, containers=[{"name": "pause", "image": "registry.k8s.io/pause"}]
        ),
    )
    assert (
        wait_phase(api, "pauses", ("Running",))["status"]["containerStatuses"][0]["ready"] is True
    )
    assert time.monotonic() - started < 20


def test_status_changes_that_follow_each_other_go_out_together(api, sandbox_nodes):
    # A kubelet reports "init container done" and "next one started" in one sync; so do we:
    # no version of the pod shows a finished init container next to a successor not started.
    (node,) = sandbox_nodes()
    inits = [shell(f"init{i}", "true") for i in range(3)]
    stream = watch.Watch().stream(
        api.list_namespaced_pod,
        NAMESPACE,
        field_selector="metadata.name=coalesced",
        timeout_seconds=60,
        _preload_content=False,
    )
    api.create_namespaced_pod(
        NAMESPACE,
        pod_manifest("coalesced", node, initContainers=inits,
                     containers=[{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]),
    )  # fmt: skip
    versions = []
    for event in stream:
        status = event["raw_object"].get("status") or {}
        versions.append(status)
        if status.get("phase") == "Running":
            break
    assert versions[-1]["phase"] == "Running"
    for status in versions:
        states = [s["state"] for s in status.get("initContainerStatuses") or []]
        for done, following in itertools.pairwise(states):
            assert not ("terminated" in done and "waiting" in following), status
    # Created, then one write per container start (three inits and the pause container).
    assert len(versions) <= 5


def test_created_files_keep_their_mode(api, sandbox, sandbox_nodes):
    (node,) = sandbox_nodes()
    api.create_namespaced_pod(
        NAMESPACE,
        pod_manifest("modes", node, restartPolicy="Never", volumes=HOST,
                     containers=[shell("c", "install -m 0750 /dev/null /root/tool", volumeMounts=HOST_MOUNT)]),
    )  # fmt: skip
    wait_phase(api, "modes", ("Succeeded",))
    assert stat.S_IMODE((sandbox.host_root_upper(node) / "tool").stat().st_mode) == 0o750
