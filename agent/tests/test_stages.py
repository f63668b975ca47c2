"""Stages run for real: bash steps chrooted into a temporary host root."""

import json
import os
import re
from pathlib import Path

import pytest

from conftest import COPY_DIR, LOG_DIR, RESOURCE_ID, STATE_DIR, Host, config, marker_script, step
from skyhook_agent.layout import step_marker

CHECKED = {"apply": "apply-check", "config": "config-check", "upgrade": "upgrade-check",
           "uninstall": "uninstall-check", "post-interrupt": "post-interrupt-check"}  # fmt: skip


def flag_path(host: Host, path: str, args: list[str], rcs: list[int] = [0]) -> str:  # noqa: B006
    return f"{STATE_DIR}/flags/demo-pkg/1.0.0/{path}_{step_marker(args, rcs)}"


@pytest.mark.parametrize("mode", list(CHECKED))
def test_each_action_stage_and_its_check_run_their_steps(host: Host, mode: str) -> None:
    modes = {mode: [step("act.sh", mode)], CHECKED[mode]: [step("act_check.sh", mode)]}
    host.write_package(
        config(modes), {"act.sh": marker_script("act"), "act_check.sh": marker_script("check")}
    )
    assert host.run(mode).returncode == 0
    assert host.run(CHECKED[mode]).returncode == 0
    assert host.markers() == [f"act {mode}", f"check {mode}"]
    assert host.path(f"{STATE_DIR}/flags/START").exists()
    assert host.path(f"{STATE_DIR}/flags/{CHECKED[mode]}_ALL_CHECKED").exists()


def test_steps_run_chrooted_in_copy_dir_and_report_on_stdout(host: Host) -> None:
    host.path("/only-on-the-host").write_text("host\n")
    probe = marker_script(
        "probe", 'echo "cwd=$(pwd)" >> /markers\ncat /only-on-the-host >> /markers'
    )
    host.write_package(
        config(
            {
                "apply": [step("probe.sh"), step("second.sh", "x")],
                "apply-check": [step("probe_check.sh")],
            }
        ),
        {"probe.sh": probe, "second.sh": marker_script("second"), "probe_check.sh": "#!/bin/sh\n"},
    )
    result = host.run("apply")
    assert result.returncode == 0, result.stderr
    assert host.markers() == ["probe ", f"cwd={COPY_DIR}", "host", "second x"]
    out = result.stdout
    assert out.startswith("=== skyhook-agent ")
    assert re.search(r"^apply 1/2 START +probe\.sh$", out, re.M)
    assert re.search(r"^apply 1/2 OK +probe\.sh rc=0 \d+\.\d{3}s$", out, re.M)
    assert re.search(r"^apply 2/2 OK +second\.sh x rc=0 \d+\.\d{3}s$", out, re.M)
    assert re.search(
        r"^=== apply succeeded: 2 ok, 0 failed, 0 skipped in \d+\.\d+s ===$", out, re.M
    )


def test_step_output_logged_with_out_err_prefixes(host: Host) -> None:
    script = "#!/bin/bash\necho one\necho two\necho oops >&2\nprintf 'no newline'\n"
    host.write_package(
        config({"apply": [step("talk.sh")], "apply-check": [step("talk.sh")]}), {"talk.sh": script}
    )
    result = host.run("apply")
    assert result.returncode == 0
    logs = list(host.path(f"{LOG_DIR}/demo-pkg/1.0.0").glob("talk.sh-*.log"))
    assert len(logs) == 1
    assert re.fullmatch(r"talk\.sh-\d{4}-\d{2}-\d{2}-\d{6}\.log", logs[0].name)
    stamp = r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d+"
    lines = logs[0].read_text().splitlines()
    assert [re.sub(stamp, "T", line) for line in lines] == [
        "[out]T one",
        "[out]T two",
        "[out]T no newline",
    ]
    err = logs[0].with_name(logs[0].name + ".err").read_text()
    assert re.fullmatch(rf"\[err\]{stamp} oops\n", err)
    assert re.search(rf"^\[out\]{stamp} two$", result.stdout, re.M)
    assert re.search(rf"^\[err\]{stamp} oops$", result.stderr, re.M)


def test_failed_step_stops_stage_with_its_output_and_nonzero_exit(host: Host) -> None:
    failing = marker_script("first", "echo 'disk is full' >&2", exit_code=3)
    host.write_package(
        config(
            {
                "apply": [step("first.sh"), step("second.sh")],
                "apply-check": [step("first_check.sh")],
            }
        ),
        {"first.sh": failing, "second.sh": marker_script("second"), "first_check.sh": "#!/bin/sh"},
    )
    result = host.run("apply")
    assert result.returncode == 1
    assert host.markers() == ["first "]
    assert "disk is full" in result.stderr
    assert re.search(r"^apply 1/2 FAILED +first\.sh rc=3 .*\(accepted: 0\)$", result.stdout, re.M)
    assert not host.path(flag_path(host, "first.sh", [])).exists()


@pytest.mark.parametrize(
    ("exit_code", "accepted", "passes"),
    [(0, (0,), True), (3, (0, 3), True), (1, (0, 3), False), (3, (0, 1), False),
     (2, (2,), True), (0, (2,), False)],
    ids=["0-in-[0]", "3-in-[0,3]", "1-not-in-[0,3]", "3-not-in-[0,1]", "2-in-[2]", "0-not-in-[2]"],
)  # fmt: skip
def test_real_exit_code_is_compared_with_returncodes(
    host: Host, exit_code: int, accepted: tuple[int, ...], passes: bool
) -> None:
    # Upstream squashes every failure to 1, so [0,1] accepted all and 3 never matched.
    host.write_package(
        config({"apply": [step("rc.sh", returncodes=accepted)], "apply-check": [step("rc.sh")]}),
        {"rc.sh": marker_script("rc", exit_code=exit_code)},
    )
    result = host.run("apply")
    assert result.returncode == (0 if passes else 1)
    assert f"rc={exit_code}" in result.stdout


def test_check_mode_runs_every_check_and_records_results(host: Host) -> None:
    checks = [step("a_check.sh"), step("b_check.sh"), step("c_check.sh")]
    host.write_package(
        config({"apply": [step("a.sh")], "apply-check": checks}),
        {"a.sh": marker_script("a"), "a_check.sh": marker_script("a_check"),
         "b_check.sh": marker_script("b_check", "test -e /b-ok || exit 1"),
         "c_check.sh": marker_script("c_check")},
    )  # fmt: skip
    failed = host.run("apply-check")
    assert failed.returncode == 1
    assert host.markers() == ["a_check ", "b_check ", "c_check "]
    results = host.read(f"{STATE_DIR}/flags/check_results")
    assert results == "a_check.sh False\nb_check.sh True\nc_check.sh False"
    assert not host.path(f"{STATE_DIR}/flags/apply-check_ALL_CHECKED").exists()
    assert not host.path(f"{STATE_DIR}/history/demo-pkg.json").exists()

    host.path("/b-ok").touch()
    assert host.run("apply-check").returncode == 0
    assert host.read(f"{STATE_DIR}/flags/check_results").count("True") == 0
    assert host.path(f"{STATE_DIR}/flags/apply-check_ALL_CHECKED").exists()
    history = json.loads(host.read(f"{STATE_DIR}/history/demo-pkg.json"))
    assert history["current-version"] == "1.0.0"
    assert [entry["version"] for entry in history["history"]] == ["1.0.0"]


def test_mode_without_steps_succeeds_as_a_no_op(host: Host) -> None:
    host.write_package(
        config({"apply": [step("a.sh")], "apply-check": [step("a.sh")]}),
        {"a.sh": marker_script("a")},
    )
    result = host.run("config")
    assert result.returncode == 0
    assert "there are no config steps defined" in result.stdout
    assert host.markers() == []


def test_on_host_false_runs_in_the_agents_own_filesystem(host: Host) -> None:
    probe = ('#!/bin/bash\nif [ -e /only-on-the-host ]; then exit 9; fi\n'
             'echo "dir=$SKYHOOK_DIR pwd=$(pwd)" > "$SKYHOOK_ROOT_MOUNT/local-marker"\n')  # fmt: skip
    host.path("/only-on-the-host").touch()
    host.write_package(
        config({"apply": [step("probe.sh", on_host=False)], "apply-check": [step("probe.sh")]}),
        {"probe.sh": probe},
    )
    result = host.run("apply")
    assert result.returncode == 0, result.stdout + result.stderr
    package = host.path(COPY_DIR)
    assert host.read("/local-marker") == f"dir={package} pwd={package}\n"


def test_env_and_env_argument_substitution(host: Host) -> None:
    show = ('#!/bin/bash\necho "args=$* FOO=$FOO STEP_ROOT=$STEP_ROOT SKYHOOK_DIR=$SKYHOOK_DIR '
            'RID=$SKYHOOK_RESOURCE_ID CR=$CR_ENV" >> /markers\n')  # fmt: skip
    host.write_package(
        config({"apply": [step("show.sh", "plain", "env:NODE_ROLE", "pre-env:x",
                               env={"FOO": "from-step"})],
                "apply-check": [step("show.sh")]}),
        {"show.sh": show},
    )  # fmt: skip
    assert host.run("apply", NODE_ROLE="gpu", CR_ENV="from-cr").returncode == 0
    assert host.markers() == [
        f"args=plain gpu pre-env:x FOO=from-step STEP_ROOT={COPY_DIR}/skyhook_dir "
        f"SKYHOOK_DIR={COPY_DIR} RID={RESOURCE_ID} CR=from-cr"
    ]
    # The flag is keyed by the raw arguments, before substitution (upstream's marker).
    raw = flag_path(host, "show.sh", ["plain", "env:NODE_ROLE", "pre-env:x"])
    assert host.path(raw).read_text().startswith("last_run: ")


def test_missing_env_arguments_are_all_reported_and_the_step_does_not_run(host: Host) -> None:
    host.write_package(
        config({"apply": [step("show.sh", "env:FIRST_MISSING", "ok", "env:SECOND_MISSING")],
                "apply-check": [step("show.sh")]}),
        {"show.sh": marker_script("show")},
    )  # fmt: skip
    result = host.run("apply")
    assert result.returncode == 1
    assert host.markers() == []
    assert "modes.apply[0].arguments[0]: environment variable FIRST_MISSING is not set" in (
        result.stderr
    )
    assert "modes.apply[0].arguments[2]: environment variable SECOND_MISSING is not set" in (
        result.stderr
    )


def test_root_dir_is_merged_onto_the_host_except_for_uninstall(host: Host) -> None:
    host.path("/etc/demo.conf").write_text("old\n")
    host.write_package(
        config({"apply": [step("a.sh")], "apply-check": [step("a.sh")],
                "uninstall": [step("a.sh")], "uninstall-check": [step("a.sh")]}),
        {"a.sh": "#!/bin/bash\ncat /etc/demo.conf /usr/local/share/demo/data >> /markers\n"},
        root_dir={"etc/demo.conf": "new\n", "usr/local/share/demo/data": "payload\n"},
    )  # fmt: skip
    host.path("/etc/demo.conf").write_text("old\n")
    assert host.run("uninstall").returncode == 1  # the files are not there yet: no copy
    assert host.read("/etc/demo.conf") == "old\n"
    assert host.run("apply").returncode == 0
    assert host.markers() == ["old", "new", "payload"]  # uninstall saw the old file
    assert host.read("/usr/local/share/demo/data") == "payload\n"


def test_expected_config_files_must_be_present(host: Host) -> None:
    host.write_package(
        config({"apply": [step("a.sh")], "apply-check": [step("a.sh")]}, expected=("settings",)),
        {"a.sh": '#!/bin/bash\ncat "$SKYHOOK_DIR/configmaps/settings" >> /markers\n'},
        configmaps={"settings": "k=v\n"},
    )
    assert host.run("apply").returncode == 0
    assert host.markers() == ["k=v"]


def test_second_run_executes_nothing_for_auto_idempotent_steps(host: Host) -> None:
    host.write_package(
        config({"apply": [step("one.sh"), step("two.sh", "arg")],
                "apply-check": [step("one.sh")],
                "post-interrupt": [step("three.sh")], "post-interrupt-check": [step("one.sh")]}),
        {"one.sh": marker_script("one"), "two.sh": marker_script("two"),
         "three.sh": marker_script("three")},
    )  # fmt: skip
    assert host.run("apply").returncode == 0
    assert host.run("post-interrupt").returncode == 0
    ran_once = host.markers()
    assert ran_once == ["one ", "two arg", "three "]
    again = host.run("apply")
    assert again.returncode == 0
    assert host.run("post-interrupt").returncode == 0
    assert host.markers() == ran_once
    assert re.search(r"^apply 1/2 SKIPPED one\.sh \(already completed", again.stdout, re.M)
    body = host.read(flag_path(host, "two.sh", ["arg"]))
    assert re.fullmatch(r"last_run: \d{4}-\d\d-\d\dT[\d:.]+\nstep_always_runs: False", body)


def test_flags_do_not_skip_self_idempotent_steps_config_or_always_run(host: Host) -> None:
    host.write_package(
        config({"apply": [step("self.sh", idempotence=True), step("auto.sh")],
                "apply-check": [step("self.sh")],
                "config": [step("conf.sh")], "config-check": [step("self.sh")]}),
        {"self.sh": marker_script("self"), "auto.sh": marker_script("auto"),
         "conf.sh": marker_script("conf")},
    )  # fmt: skip
    for _ in range(2):
        assert host.run("apply").returncode == 0
        assert host.run("config").returncode == 0
    assert host.markers() == ["self ", "auto ", "conf ", "self ", "conf "]
    forced = host.run("apply", OVERLAY_ALWAYS_RUN_STEP="TRUE")
    assert "OVERLAY_ALWAYS_RUN_STEP=true" in forced.stdout
    assert host.markers()[-2:] == ["self ", "auto "]


def test_changed_arguments_rearm_a_flagged_step(host: Host) -> None:
    modes = {"apply": [step("a.sh", "v1")], "apply-check": [step("a.sh")]}
    host.write_package(config(modes), {"a.sh": marker_script("a")})
    host.run("apply")
    host.write_package(config({**modes, "apply": [step("a.sh", "v2")]}), {})
    host.run("apply")
    assert host.markers() == ["a v1", "a v2"]


def test_write_logs_false_creates_no_log_dir(host: Host) -> None:
    host.write_package(
        config({"apply": [step("a.sh")], "apply-check": [step("a.sh")]}),
        {"a.sh": marker_script("a")},
    )
    assert host.run("apply", SKYHOOK_AGENT_WRITE_LOGS="false").returncode == 0
    assert host.markers() == ["a "]
    assert not host.logs.exists()


def test_log_reaping_keeps_the_five_newest_logs_per_step(host: Host) -> None:
    host.write_package(
        config({"apply": [step("a.sh", idempotence=True)], "apply-check": [step("a.sh")]}),
        {"a.sh": marker_script("a")},
    )
    log_dir = host.path(f"{LOG_DIR}/demo-pkg/1.0.0")
    log_dir.mkdir(parents=True)
    old = []
    for day in range(1, 8):
        log = log_dir / f"a.sh-2020-01-0{day}-000000.log"
        log.write_text("old\n")
        (log_dir / f"{log.name}.err").write_text("")
        stamp = 1577836800 + day * 86400
        os.utime(log, (stamp, stamp))
        old.append(log.name)
    other = log_dir / "a.sh_other-2020-01-01-000000.log"  # another step's log is not reaped
    other.write_text("")
    for _ in range(2):
        assert host.run("apply").returncode == 0
    kept = sorted(p.name for p in log_dir.glob("a.sh-*.log"))
    assert len(kept) == 5
    assert kept[:3] == old[-3:]  # the 3 newest old ones survive next to the 2 new runs
    assert other.exists()
    assert len(list(log_dir.glob("a.sh-*.log.err"))) == 9  # .err files are not reaped (upstream)


def test_upgrade_gets_previous_and_current_versions(host: Host) -> None:
    show = '#!/bin/bash\necho "args=$* prev=$PREVIOUS_VERSION cur=$CURRENT_VERSION" >> /markers\n'
    base = {"apply": [step("show.sh")], "apply-check": [step("show.sh")]}
    host.write_package(config(base), {"show.sh": show})
    assert host.run("apply-check").returncode == 0  # records 1.0.0 as installed

    upgrade = {**base, "upgrade": [step("show.sh", upgrade_step=True), step("show.sh", "plain")],
               "upgrade-check": [step("show.sh", upgrade_step=True)]}  # fmt: skip
    host.write_package(config(upgrade, version="2.0.0"), {})
    assert host.run("upgrade").returncode == 0
    assert host.run("upgrade-check").returncode == 0
    assert host.markers() == [
        "args= prev= cur=",  # apply-check: no version env
        "args=1.0.0 2.0.0 prev=1.0.0 cur=2.0.0",
        "args=plain prev=1.0.0 cur=2.0.0",
        "args=1.0.0 2.0.0 prev=1.0.0 cur=2.0.0",
    ]
    history = json.loads(host.read(f"{STATE_DIR}/history/demo-pkg.json"))
    assert history["current-version"] == "2.0.0"
    assert [e["version"] for e in history["history"]] == ["2.0.0", "1.0.0"]
    assert all(e["time"].endswith("+00:00") for e in history["history"])


def test_upgrade_without_history_says_unknown(host: Host) -> None:
    show = '#!/bin/bash\necho "args=$* prev=$PREVIOUS_VERSION" >> /markers\n'
    host.write_package(
        config(
            {"upgrade": [step("show.sh", upgrade_step=True)], "upgrade-check": [step("show.sh")]}
        ),
        {"show.sh": show},
    )
    assert host.run("upgrade").returncode == 0
    assert host.markers() == ["args=unknown 1.0.0 prev=unknown"]


def test_uninstall_check_cleans_this_packages_flags_and_records_uninstalled(host: Host) -> None:
    host.write_package(
        config({"apply": [step("a.sh")], "apply-check": [step("a.sh")],
                "uninstall": [step("u.sh")], "uninstall-check": [step("u.sh")]}),
        {"a.sh": marker_script("a"), "u.sh": marker_script("u")},
    )  # fmt: skip
    assert host.run("apply").returncode == 0
    assert host.run("apply-check").returncode == 0
    apply_flag = host.path(flag_path(host, "a.sh", []))
    assert apply_flag.exists()
    unrelated = host.path(f"{STATE_DIR}/flags/other-pkg/1.0.0/x.sh_W11fWzBd")
    unrelated.parent.mkdir(parents=True)
    unrelated.touch()

    assert host.run("uninstall").returncode == 0
    assert apply_flag.exists()  # only a successful uninstall-check cleans
    assert host.run("uninstall-check").returncode == 0
    assert not apply_flag.exists()
    assert not host.path(flag_path(host, "u.sh", [])).exists()
    assert unrelated.exists()
    assert host.path(f"{STATE_DIR}/flags/apply-check_ALL_CHECKED").exists()
    history = json.loads(host.read(f"{STATE_DIR}/history/demo-pkg.json"))
    assert history["current-version"] == "uninstalled"
    assert [e["version"] for e in history["history"]] == ["uninstalled", "1.0.0"]

    assert host.run("apply").returncode == 0  # reinstall runs the auto step again
    assert host.markers() == ["a ", "a ", "u ", "u ", "a "]


def test_uninstall_needs_no_configmaps(host: Host) -> None:
    host.write_package(
        config({"apply": [step("a.sh")], "apply-check": [step("a.sh")],
                "uninstall": [step("a.sh")], "uninstall-check": [step("a.sh")]},
               expected=("settings",)),
        {"a.sh": marker_script("a")},
    )  # fmt: skip
    assert host.run("uninstall").returncode == 0
    assert host.markers() == ["a "]


def test_corrupt_history_is_backed_up(host: Host) -> None:
    host.write_package(
        config({"apply": [step("a.sh")], "apply-check": [step("a.sh")]}),
        {"a.sh": marker_script("a")},
    )
    history = host.path(f"{STATE_DIR}/history/demo-pkg.json")
    history.parent.mkdir(parents=True)
    history.write_text("{not json")
    result = host.run("apply-check")
    assert result.returncode == 0
    assert history.with_name("demo-pkg.json.backup").read_text() == "{not json"
    assert json.loads(history.read_text())["current-version"] == "1.0.0"
    assert "corrupt" in result.stdout


def test_legacy_mode_copies_the_package_from_the_data_dir(host: Host, tmp_path: Path) -> None:
    # Upstream's legacy mode: no init container copied the package, so the agent does.
    image = Host(tmp_path / "image", copy_dir="/skyhook-package")
    image.write_package(
        config({"apply": [step("a.sh")], "apply-check": [step("a.sh")]}),
        {"a.sh": marker_script("a")},
    )
    result = host.run("apply", SKYHOOK_DATA_DIR=str(image.path("/skyhook-package")))
    assert result.returncode == 0, result.stdout + result.stderr
    assert host.path(f"{COPY_DIR}/config.json").exists()
    assert host.markers() == ["a "]


def test_copy_resolv_copies_the_agents_resolver_config(host: Host) -> None:
    host.write_package(config({"apply": [step("a.sh")], "apply-check": [step("a.sh")]}),
                       {"a.sh": marker_script("a")})  # fmt: skip
    assert host.run("apply", COPY_RESOLV="true").returncode == 0
    assert host.read("/etc/resolv.conf") == Path("/etc/resolv.conf").read_text()


def test_host_write_failure_mid_stage_is_one_clear_line(host: Host) -> None:
    host.write_package(config({"apply": [step("a.sh")], "apply-check": [step("a.sh")]}),
                       {"a.sh": marker_script("a")})  # fmt: skip
    # Passes preflight (the log root is fine) but the package's log dir cannot be created.
    host.path(f"{LOG_DIR}/demo-pkg").mkdir(parents=True)
    host.path(f"{LOG_DIR}/demo-pkg/1.0.0").write_text("in the way")
    result = host.run("apply")
    assert result.returncode == 1
    assert "error: host write failed: [Errno 17] File exists:" in result.stderr
    assert "Traceback" not in result.stderr
