"""Runs one pod on a simulated node the way a kubelet does.

Init containers run one at a time in order, then the app containers together. restartPolicy
decides what a failed container does: Never fails the pod, OnFailure/Always restart it after a
back-off (CrashLoopBackOff in between, restartCount counting). Status goes back to the API after
every change; a change followed at once by another (a volume set up, an init container done:
the next container starts right away) goes out with the next one, as one kubelet sync would
report both. Deletion sends SIGTERM to each container's first process, SIGKILL to what is left
after the grace period, and finalizes the pod; a node reboot signals every process and, for
restartable pods, runs the init containers again. `activeDeadlineSeconds` counts from the pod's
startTime: once it has passed, the containers are stopped as on deletion and the pod fails with
reason DeadlineExceeded.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import logging
import os
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from skyhook_sandbox import container, imageroot, podenv, volumes
from skyhook_sandbox.hostroot import NodeRoot
from skyhook_sandbox.images import ImageMap, ImageNotFound, ResolvedImage
from skyhook_sandbox.kubeclient import ApiError, KubeClient
from skyhook_sandbox.podstatus import ContainerRecord, exit_code, now, pod_status
from skyhook_sandbox.pull import MACHINE_ARCH

JsonDict = dict[str, Any]
log = logging.getLogger("skyhook_sandbox.pod")
TERMINAL = ("Succeeded", "Failed")
DEADLINE_MESSAGE = "Pod was active on the node longer than the specified deadline"
# How long a deferred status change may wait for the write that would carry it.
STATUS_COALESCE_S = 0.5


@dataclass(frozen=True)
class Backoff:
    initial: float = 1.0
    maximum: float = 10.0

    def delay(self, restarts: int) -> float:
        return float(min(self.initial * (2 ** max(restarts - 1, 0)), self.maximum))


class Interrupted(Exception):
    """The pod is being deleted or its node rebooted: stop the flow."""


class WorkerNode(Protocol):
    """The node a pod runs on, as its worker uses it: a Protocol rather than `SimulatedNode`
    itself, because node.py imports this module to create the workers."""

    name: str
    host_ip: str
    pods_dir: Path
    root: NodeRoot
    client: KubeClient
    images: ImageMap
    backoff: Backoff
    machine_shims: list[tuple[str, str]]
    fake_pod_seconds: float | None

    def allocate_pod_ip(self) -> str: ...

    async def event(self, pod: JsonDict, reason: str, message: str, kind: str) -> None: ...


class PodWorker:
    def __init__(self, node: WorkerNode, pod: JsonDict) -> None:
        self.node = node
        self.pod = pod
        meta = pod["metadata"]
        self.uid: str = meta["uid"]
        self.namespace: str = meta["namespace"]
        self.name: str = meta["name"]
        spec = pod["spec"]
        self.policy: str = spec.get("restartPolicy", "Always")
        self.inits = [
            ContainerRecord(c["name"], c["image"], True) for c in spec.get("initContainers") or []
        ]
        self.mains = [
            ContainerRecord(c["name"], c["image"], False) for c in spec.get("containers") or []
        ]
        self.phase = "Pending"
        # A pod this kubelet already started (the node host restarted) keeps its startTime.
        self.start_time: str = (pod.get("status") or {}).get("startTime") or now()
        self.reason = ""  # the pod's own reason and message, once the kubelet failed it
        self.message = ""
        self.deadline: asyncio.Task[None] | None = None
        self.deadline_seconds: int | None = None
        self.volumes_ready = False
        self.prepared: dict[str, volumes.PreparedVolume] = {}
        self.pod_dir: Path = node.pods_dir / self.uid
        self.processes: dict[str, asyncio.subprocess.Process] = {}
        self.flow: asyncio.Task[None] | None = None
        self.finalizer: asyncio.Task[None] | None = None
        self.stopping = False
        self.finalizing = False
        self._written: str = ""
        self._write_lock = asyncio.Lock()
        self._deferred: asyncio.TimerHandle | None = None
        self._deferred_write: asyncio.Task[None] | None = None
        self.pod_ip = node.host_ip if spec.get("hostNetwork") else node.allocate_pod_ip()

    @property
    def path(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/pods/{self.name}"

    # -- lifecycle driven by the node -------------------------------------------------------

    def start(self) -> None:
        self.flow = asyncio.create_task(self._run(), name=f"pod {self.namespace}/{self.name}")
        self._arm_deadline()

    def update(self, pod: JsonDict) -> None:
        self.pod = pod
        if self.flow is not None and pod["spec"].get("activeDeadlineSeconds") != (
            self.deadline_seconds
        ):
            self._arm_deadline()  # the API lets a deadline be set or lowered on a live pod
        if pod["metadata"].get("deletionTimestamp") and not self.finalizing:
            self.finalizing = True
            self.finalizer = asyncio.create_task(
                self._finalize(), name=f"finalize {self.namespace}/{self.name}"
            )

    async def forget(self) -> None:
        """The pod object is gone (force-deleted): stop everything at once."""
        self.finalizing = True
        self._cancel_deferred()
        self._disarm_deadline()
        await self._stop_processes(grace=0)
        await self._remove_pod_dir()

    async def node_going_down(self, grace: float) -> None:
        """A reboot: every process of the pod gets SIGTERM, then SIGKILL after `grace`.

        Like a container runtime after a node restart, the containers that were running are
        reported as terminated with exit code 255, reason Unknown.
        """
        lost = set(self.processes)
        await self._stop_processes(grace, whole_group=True)
        for record in [*self.inits, *self.mains]:
            if record.name in lost:
                record.lost("the node rebooted while the container was running")
        await self._write_status()

    async def node_came_up(self) -> None:
        if self.finalizing or self.phase in TERMINAL:
            return
        if self.flow is None:  # arrived while the node was down: a first start
            self.start()
            return
        if self.policy == "Never":
            self.phase = "Failed"
            await self._write_status()
            return
        self.phase = "Pending"
        self.stopping = False
        for record in [*self.inits, *self.mains]:
            if record.container_id and not self._completed(record):
                record.restart_count += 1  # it ran before the reboot and runs again
        self.start()

    # -- activeDeadlineSeconds ------------------------------------------------------------------

    def _arm_deadline(self) -> None:
        """Time the pod's deadline from its startTime, as a kubelet does (once per pod, not
        per container run: restarts and reboots do not reset it)."""
        self._disarm_deadline()
        seconds = self.pod["spec"].get("activeDeadlineSeconds")
        self.deadline_seconds = seconds
        if seconds is None or self.phase in TERMINAL or self.finalizing:
            return
        started = dt.datetime.fromisoformat(self.start_time).timestamp()
        delay = max(started + float(seconds) - time.time(), 0.0)
        self.deadline = asyncio.create_task(
            self._deadline_passes(delay), name=f"deadline {self.namespace}/{self.name}"
        )

    def _disarm_deadline(self) -> None:
        deadline, self.deadline = self.deadline, None
        if deadline is not None and deadline is not asyncio.current_task():
            deadline.cancel()  # not from within: the expiry itself goes on to stop the pod

    async def _deadline_passes(self, delay: float) -> None:
        await asyncio.sleep(delay)
        if self.finalizing or self.phase in TERMINAL:
            return
        # Failed first, so neither the flow nor a node coming back up starts anything again.
        self.phase, self.reason, self.message = "Failed", "DeadlineExceeded", DEADLINE_MESSAGE
        await self.node.event(self.pod, "DeadlineExceeded", DEADLINE_MESSAGE, "Normal")
        await self._stop_processes(self._grace())
        if not self.finalizing:
            await self._write_status()

    # -- the kubelet flow ---------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            if self.node.fake_pod_seconds is not None:
                await self._fake_run(self.node.fake_pod_seconds)
                return
            await self._prepare_volumes()
            for record in self.inits:
                if not self._completed(record):
                    await self._run_until_done(record, self._spec(record), restart_on_success=False)
            codes = await asyncio.gather(*(self._run_main(record) for record in self.mains))
            self.phase = "Succeeded" if all(code == 0 for code in codes) else "Failed"
            await self._write_status()
        except Interrupted:
            pass
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("pod %s/%s: unexpected error", self.namespace, self.name)

    async def _fake_run(self, seconds: float) -> None:
        """A fake kubelet's pod: statuses as a real run reports them, no process behind them.

        The init containers share `seconds` evenly, each exiting 0. App containers that run
        a command of the pod's (a stage pod's `done`) then exit 0 at once and the pod
        Succeeds, unless restartPolicy is Always; those that run their image's own (pause) run
        until the pod is deleted or its node reboots.
        """
        self.volumes_ready = True
        pending = [r for r in self.inits if not self._completed(r)]
        for record in pending:
            record.run(f"fake://{self.uid}/{record.name}")
            await self._write_status()
            await self._sleep(seconds / len(pending))
            record.finish(0)
            self._defer_status()  # the next container starts now and reports both
        for record in self.mains:
            record.run(f"fake://{self.uid}/{record.name}")
        if self.policy != "Always" and all("command" in self._spec(r) for r in self.mains):
            for record in self.mains:
                record.finish(0)
            self.phase = "Succeeded"
            await self._write_status()
            return
        self.phase = "Running"
        await self._write_status()
        await asyncio.Event().wait()  # until cancelled by a deletion or a reboot

    def _completed(self, record: ContainerRecord) -> bool:
        """Succeeded for good: the API forbids a container that exited 0 to run again unless
        restartPolicy is Always, so after a reboot only Always pods re-run those."""
        done = record.terminated
        return done is not None and done["exitCode"] == 0 and self.policy != "Always"

    def _spec(self, record: ContainerRecord) -> JsonDict:
        spec = self.pod["spec"]
        group = spec.get("initContainers" if record.init else "containers") or []
        return next(c for c in group if c["name"] == record.name)

    async def _run_main(self, record: ContainerRecord) -> int:
        if self._completed(record):
            return 0
        always = self.policy == "Always"
        return await self._run_until_done(record, self._spec(record), restart_on_success=always)

    def _check(self) -> None:
        if self.stopping or self.finalizing:
            raise Interrupted

    async def _sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
        self._check()

    async def _prepare_volumes(self) -> None:
        attempt = 0
        while True:
            self._check()
            try:
                builder = volumes.VolumeBuilder(
                    self.pod, self.pod_dir, self.node.root.merged, self._fetch, self._request_token,
                )  # fmt: skip
                self.prepared = await builder.prepare()
                self.volumes_ready = True
                self._defer_status()  # the first container starts now and reports both
                return
            except (volumes.VolumeError, ApiError) as error:
                attempt += 1
                message = f"MountVolume.SetUp failed: {error}"
                for record in [*self.inits, *self.mains]:
                    record.wait("ContainerCreating", message)
                await self._write_status()
                await self.node.event(self.pod, "FailedMount", message, "Warning")
                await self._sleep(self.node.backoff.delay(attempt))

    async def _fetch(self, kind: str, name: str) -> JsonDict | None:
        plural = "configmaps" if kind == "configmap" else "secrets"
        try:
            return await self.node.client.get(
                f"/api/v1/namespaces/{self.namespace}/{plural}/{name}"
            )
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    async def _request_token(self, account: str, seconds: int, audience: str) -> str:
        body: JsonDict = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "expirationSeconds": max(seconds, 600),
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": self.name,
                    "uid": self.uid,
                },
                **({"audiences": [audience]} if audience else {}),
            },
        }
        path = f"/api/v1/namespaces/{self.namespace}/serviceaccounts/{account}/token"
        result = await self.node.client.create(path, body)
        return str(result["status"]["token"])

    async def _run_until_done(
        self, record: ContainerRecord, spec: JsonDict, restart_on_success: bool
    ) -> int:
        while True:
            self._check()
            code = await self._run_once(record, spec)
            if code == 0 and not restart_on_success:
                return 0
            if code != 0 and self.policy == "Never":
                if record.init:
                    self.phase = "Failed"
                    await self._write_status()
                    raise Interrupted
                return code
            delay = self.node.backoff.delay(record.restart_count + 1)
            record.restart_waiting(
                "CrashLoopBackOff",
                f"back-off {delay:g}s restarting failed container={record.name} pod={self.name}",
            )
            await self._write_status()
            await self._sleep(delay)
            record.restart_count += 1

    async def _pull(self, image: ResolvedImage) -> ResolvedImage:
        """Pull a `run: pull` image for the node's architecture, with a kubelet's events."""
        if image.pull is None:
            return image
        reference = image.reference
        await self.node.event(self.pod, "Pulling", f'Pulling image "{reference}"', "Normal")
        started = time.monotonic()
        pulled = await self.node.images.pulled(image, MACHINE_ARCH)
        seconds = time.monotonic() - started
        message = f'Successfully pulled image "{reference}" in {seconds:.3f}s'
        await self.node.event(self.pod, "Pulled", message, "Normal")
        return pulled

    async def _run_once(self, record: ContainerRecord, spec: JsonDict) -> int:
        """Start the container (retrying pull/config errors) and return its exit code."""
        attempt = 0
        while True:
            self._check()
            try:
                image = await self._pull(self.node.images.resolve(spec["image"]))
                objects = {ref: await self._fetch(*ref) for ref in podenv.referenced_objects(spec)}
                key, values = podenv.lookups(objects)
                env = podenv.container_env(spec, self.pod, key, values)
                break
            except ImageNotFound as error:
                reason, message = (
                    ("ErrImagePull" if attempt % 2 == 0 else "ImagePullBackOff"),
                    str(error),
                )
            except (podenv.ContainerConfigError, ApiError) as error:
                reason, message = "CreateContainerConfigError", str(error)
            attempt += 1
            record.restart_waiting(reason, message)
            await self._write_status()
            await self.node.event(self.pod, "Failed", f"Error: {message}", "Warning")
            await self._sleep(self.node.backoff.delay(attempt))
        run_dir = self.pod_dir / "containers" / record.name / str(record.restart_count)
        try:
            argv = podenv.command_line(spec, image.entrypoint, image.args, env)
            mounts = volumes.mounts_for(spec, self.prepared)
            container_spec = self._container_spec(
                image, spec, argv=argv, env=env, mounts=mounts, run_dir=run_dir
            )
        except (podenv.ContainerConfigError, volumes.VolumeError) as error:
            record.finish(container.SETUP_FAILED, "StartError", str(error))
            await self._write_status()
            return container.SETUP_FAILED
        log_path = self.log_path(record.name, record.restart_count)
        process = await container.start(container_spec, log_path, self.node.name)
        self.processes[record.name] = process
        record.run(f"sandbox://{process.pid}")
        if not record.init and self.phase == "Pending":
            self.phase = "Running"  # a kubelet reports Running once a container has started
        await self._write_status()
        code = exit_code(await process.wait())
        self.processes.pop(record.name, None)
        record.finish(code)
        self._check()  # killed by a deletion or reboot: no restart logic, the stopper reports
        if record.init and code == 0:
            self._defer_status()  # the next container starts now and reports both
        else:
            await self._write_status()
        return code

    def _container_spec(
        self,
        image: ResolvedImage,
        spec: JsonDict,
        *,
        argv: list[str],
        env: dict[str, str],
        mounts: list[container.Mount],
        run_dir: Path,
    ) -> container.ContainerSpec:
        if image.root:
            return imageroot.container_spec(
                Path(image.root),
                run_dir,
                argv=argv,
                env={**image.env, **env},
                working_dir=spec.get("workingDir") or image.working_dir,
                user=image.user,
                mounts=mounts,
                node_root=self.node.root.merged,
            )
        layers = []
        for index, (source, target) in enumerate(image.content):
            upper, work = run_dir / f"layer{index}" / "upper", run_dir / f"layer{index}" / "work"
            upper.mkdir(parents=True, exist_ok=True)
            work.mkdir(parents=True, exist_ok=True)
            layers.append(container.ImageLayer(source, target, str(upper), str(work)))
        return container.ContainerSpec(
            argv=argv,
            env={**image.env, **env},
            working_dir=spec.get("workingDir", ""),
            layers=layers,
            mounts=mounts,
            shims=self.node.machine_shims,
            # Only while the image's own entrypoint runs: a pod's `command` may do anything.
            isolated=not (
                image.touches_no_files and not spec.get("command") and not spec.get("workingDir")
            ),
        )

    def log_path(self, container_name: str, run: int) -> Path:
        return self.pod_dir / "logs" / container_name / f"{run}.log"

    # -- stopping ------------------------------------------------------------------------------

    async def _stop_processes(self, grace: float, *, whole_group: bool = False) -> None:
        """SIGTERM, up to `grace` seconds, then SIGKILL. Like a container runtime, the SIGTERM
        goes to each container's first process only (a stage's agent then lets its running step
        finish); `whole_group` signals every process, as a host shutting down does. Whatever
        is left of a container once its first process has gone is killed with it."""
        self.stopping = True
        running = dict(self.processes)
        terminate = os.killpg if whole_group else os.kill
        for process in running.values():
            with contextlib.suppress(ProcessLookupError):
                terminate(process.pid, signal.SIGTERM)
        if running:
            waiters = [asyncio.create_task(p.wait()) for p in running.values()]
            if grace > 0:
                await asyncio.wait(waiters, timeout=grace)
            for process in running.values():
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
            await asyncio.gather(*waiters, return_exceptions=True)
        if self.flow is not None:
            self.flow.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.flow
        for record in [*self.inits, *self.mains]:
            if record.running:
                stopped = running.get(record.name)
                record.finish(
                    exit_code(stopped.returncode)
                    if stopped and stopped.returncode is not None
                    else 137
                )

    def _grace(self) -> float:
        meta, spec = self.pod["metadata"], self.pod["spec"]
        grace = meta.get("deletionGracePeriodSeconds")
        if grace is None:
            grace = spec.get("terminationGracePeriodSeconds", 30)
        return float(grace)

    async def _finalize(self) -> None:
        self._disarm_deadline()
        await self.node.event(self.pod, "Killing", "Stopping container(s)", "Normal")
        await self._stop_processes(self._grace())
        if self.phase not in TERMINAL:
            finished = [r.terminated for r in self.mains]
            all_zero = all(t is not None and t["exitCode"] == 0 for t in finished)
            self.phase = "Succeeded" if self.mains and all_zero else "Failed"
        with contextlib.suppress(ApiError):
            await self._write_status(force=True)
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                "preconditions": {"uid": self.uid}}  # fmt: skip
        try:
            await self.node.client.delete(self.path, body)
        except ApiError as error:
            if error.status not in (404, 409):
                log.warning("finalizing %s/%s: %s", self.namespace, self.name, error)
        await self._remove_pod_dir()

    async def _remove_pod_dir(self) -> None:
        if self.node.fake_pod_seconds is None:  # a fake kubelet's pod never had one
            await asyncio.to_thread(shutil.rmtree, self.pod_dir, ignore_errors=True)

    # -- status ------------------------------------------------------------------------------

    def _defer_status(self) -> None:
        """Leave the current change to the next write, or write it after STATUS_COALESCE_S."""
        if self._deferred is None:
            loop = asyncio.get_running_loop()
            self._deferred = loop.call_later(STATUS_COALESCE_S, self._write_deferred)

    def _write_deferred(self) -> None:
        self._deferred = None
        self._deferred_write = asyncio.create_task(self._write_status())

    def _cancel_deferred(self) -> None:
        if self._deferred is not None:
            self._deferred.cancel()
            self._deferred = None

    async def _write_status(self, force: bool = False) -> None:
        self._cancel_deferred()  # this write carries whatever was deferred
        status = pod_status(
            self.phase,
            host_ip=self.node.host_ip,
            pod_ip=self.pod_ip,
            start_time=self.start_time,
            volumes_ready=self.volumes_ready,
            inits=self.inits,
            mains=self.mains,
            reason=self.reason,
            message=self.message,
        )
        # As a kubelet, it keeps the conditions others set (the apiserver's DisruptionTarget
        # on an evicted pod): the merge patch replaces the whole list.
        ours = {c["type"] for c in status["conditions"]}
        others = (self.pod.get("status") or {}).get("conditions") or ()
        status["conditions"] += [c for c in others if c.get("type") not in ours]
        text = json.dumps(status, sort_keys=True)
        async with self._write_lock:
            if text == self._written and not force:
                return
            if self.finalizing and not force:
                return
            try:
                await self.node.client.merge_patch(
                    self.path + "/status", {"status": status}, answer=False
                )
                self._written = text
            except ApiError as error:
                if error.status != 404:
                    log.warning("status of %s/%s: %s", self.namespace, self.name, error)
                    self._defer_status()  # try again: the apiserver may be restarting
