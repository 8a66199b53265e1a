"""hvdkeras.common.horovod_env: thread budgets, the launcher's rank and Horovod's settings as environment variables."""
import pathlib
import re

import pytest

from hvdkeras import config as config_lib
from hvdkeras.common import horovod_env


# Never fewer than two inter-op threads: with one, a ready gradient's allreduce waits behind the backward pass
# (horovod_env.thread_budget's docstring has the lab's figures).
@pytest.mark.parametrize("cores, ranks, intra, inter", [
    (1, 1, 1, 2), (2, 2, 1, 2), (2, 1, 2, 2), (16, 2, 8, 2), (64, 8, 8, 2), (3, 4, 1, 2), (96, 1, 96, 24),
])
def test_thread_budget(cores, ranks, intra, inter):
    assert horovod_env.thread_budget(cores, ranks) == horovod_env.ThreadBudget(intra, inter)


def test_thread_budget_overrides():
    assert horovod_env.thread_budget(16, 2, intra_op=3, inter_op=5) == horovod_env.ThreadBudget(3, 5)


# CPU binding: local rank r of k on cores[r*n//k:(r+1)*n//k] of the n its host's ranks share.
@pytest.mark.parametrize("shared, rank, ranks, block", [
    ((0, 1), 0, 2, (0,)), ((0, 1), 1, 2, (1,)),
    (tuple(range(8)), 1, 2, (4, 5, 6, 7)), (tuple(range(8)), 3, 4, (6, 7)),
    ((0, 1, 2), 0, 2, (0,)), ((0, 1, 2), 1, 2, (1, 2)),  # uneven: every core used, blocks differ by one
    ((2, 3, 6, 7), 1, 2, (6, 7)),  # a cpuset with gaps: its own cores, in order
])
def test_cpu_binding_gives_each_local_rank_its_block(shared, rank, ranks, block):
    binding = horovod_env.cpu_binding("auto", shared, shared, rank, ranks)
    assert binding.cpus == block
    assert binding.describe() == (f"cores {horovod_env.format_cpu_list(block)}"
                                  f" (local rank {rank} of {ranks} on {len(shared)} cores (auto))")


@pytest.mark.parametrize("setting, allowed, shared, ranks, why", [
    ("none", (0, 1), (0, 1), 2, "runtime.cpu_binding: none"),
    ("auto", (0, 1), (0, 1), 1, "the only rank on this host"),
    ("auto", (1,), (0, 1), 2, "the launcher bound this rank to cores 1"),  # mpirun --bind-to core, srun, taskset
    ("auto", (0, 1), (0, 1), 4, "2 core(s) for 4 ranks on this host"),
])
def test_cpu_binding_leaves_the_affinity_alone(setting, allowed, shared, ranks, why):
    binding = horovod_env.cpu_binding(setting, allowed, shared, 0, ranks)
    assert binding.cpus == () and binding.describe() == f"unbound ({why})"


@pytest.mark.parametrize("text, cpus", [("0", (0,)), ("0-3", (0, 1, 2, 3)), ("0-2,5,7-8\n", (0, 1, 2, 5, 7, 8)),
                                        ("", ())])
def test_cpu_lists_parse_and_format_as_the_kernel_writes_them(text, cpus):
    assert horovod_env.parse_cpu_list(text) == cpus
    if cpus:
        assert horovod_env.parse_cpu_list(horovod_env.format_cpu_list(cpus)) == cpus


def _fake_host(tmp_path, cgroup, files):
    proc, sys_ = tmp_path / "proc", tmp_path / "sys"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text(cgroup)
    for rel, text in files.items():
        (sys_ / rel).parent.mkdir(parents=True, exist_ok=True)
        (sys_ / rel).write_text(text)
    return str(proc), str(sys_)


@pytest.mark.parametrize("cgroup, files, cpus", [
    ("0::/job/step\n", {"fs/cgroup/job/step/cpuset.cpus.effective": "4-7\n",
                        "devices/system/cpu/online": "0-15\n"}, (4, 5, 6, 7)),  # cgroup v2 (a Slurm step)
    ("3:cpuset:/docker/abc\n0::/\n", {"fs/cgroup/cpuset/docker/abc/cpuset.effective_cpus": "0,2\n",
                                     "devices/system/cpu/online": "0-3\n"}, (0, 2)),  # cgroup v1 (a container)
    ("0::/\n", {"devices/system/cpu/online": "0-3\n"}, (0, 1, 2, 3)),  # no cpuset: the online cores
])
def test_the_shared_cores_come_from_the_cgroup_cpuset(tmp_path, cgroup, files, cpus):
    assert horovod_env.shared_cpus(*_fake_host(tmp_path, cgroup, files)) == cpus


def test_launcher_rank(monkeypatch):
    for var in ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"):
        monkeypatch.delenv(var, raising=False)
    assert horovod_env.launcher_rank() is None
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "3")
    assert horovod_env.launcher_rank() == 3


def test_stall_settings_become_horovod_environment():
    cfg = config_lib.load(None, ["horovod.stall_warning_seconds=30", "horovod.stall_shutdown_seconds=300"])
    assert horovod_env.stall_environment(cfg.horovod) == {"HOROVOD_STALL_CHECK_TIME_SECONDS": "30",
                                                          "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "300"}
    off = config_lib.load(None, ["horovod.stall_warning_seconds=0"])
    assert horovod_env.stall_environment(off.horovod) == {"HOROVOD_STALL_CHECK_DISABLE": "1"}


def test_horovod_knobs_resolved_per_host_and_exported():
    cfg = config_lib.load(None, ["horovod.timeline=timeline.json", "horovod.autotune=true",
                                 "horovod.autotune_log=autotune.csv", "horovod.hierarchical_allreduce=true"])
    resolved = horovod_env.resolve_horovod(cfg.horovod)
    assert (resolved.cycle_time_ms, resolved.fusion_threshold_mb) == (None, None)  # Horovod's own, on any host
    env = horovod_env.horovod_environment(resolved, workdir="/w")
    assert "HOROVOD_CYCLE_TIME" not in env and "HOROVOD_FUSION_THRESHOLD" not in env  # Horovod's defaults
    assert env["HOROVOD_TIMELINE"] == "/w/timeline.json" and env["HOROVOD_AUTOTUNE_LOG"] == "/w/autotune.csv"
    assert env["HOROVOD_AUTOTUNE"] == "1" and env["HOROVOD_HIERARCHICAL_ALLREDUCE"] == "1"
    explicit = config_lib.load(None, ["horovod.cycle_time_ms=3.5", "horovod.fusion_threshold_mb=0"]).horovod
    assert horovod_env.resolve_horovod(explicit).cycle_time_ms == 3.5
    assert horovod_env.horovod_environment(horovod_env.resolve_horovod(explicit))["HOROVOD_FUSION_THRESHOLD"] \
        == "0"


def test_idle_wait_reaches_the_patched_horovod_and_zero_leaves_horovods_own_loop():
    default = config_lib.load(None, []).horovod
    assert horovod_env.horovod_environment(default)["HVDKERAS_IDLE_WAIT_MS"] == "50"
    assert horovod_env.horovod_environment(
        config_lib.load(None, ["horovod.idle_wait_ms=2.5"]).horovod)["HVDKERAS_IDLE_WAIT_MS"] == "2.5"
    off = config_lib.load(None, ["horovod.idle_wait_ms=0"]).horovod
    assert "HVDKERAS_IDLE_WAIT_MS" not in horovod_env.horovod_environment(off)
    # the variable the patch reads, named once in the patch file
    patch = (pathlib.Path(horovod_env.__file__).parent.parent / "build_horovod" / "patches"
             / "0008-idle-background-loop-waits-for-work.patch").read_text()
    assert f'"{horovod_env.IDLE_WAIT_VARIABLE}"' in patch
    with pytest.raises(config_lib.ConfigError, match=r"horovod.idle_wait_ms .*must be >= 0.*received: -1"):
        config_lib.load(None, ["horovod.idle_wait_ms=-1"])


def test_compression_defaults_to_none_on_every_layout_and_auto_is_fp16_across_hosts():
    default = config_lib.load(None, []).horovod
    assert default.compression == "none"
    for multi_host in (False, True):
        assert horovod_env.resolve_horovod(default, multi_host=multi_host).compression == "none"
    auto = config_lib.load(None, ["horovod.compression=auto"]).horovod
    assert horovod_env.resolve_horovod(auto, multi_host=True).compression == "fp16"
    assert horovod_env.resolve_horovod(auto, multi_host=False).compression == "none"


def test_every_chosen_value_has_a_reason_and_only_those():
    budget = horovod_env.thread_budget(8, 2)
    requested = config_lib.load(None, ["horovod.compression=auto"])
    resolved = horovod_env.resolve_horovod(requested.horovod, multi_host=True)
    why = horovod_env.auto_reasons(requested.horovod, requested.runtime, resolved, budget,
                                   multi_host=True, cores=8, ranks_on_host=2)
    assert why == {"horovod.compression": "fp16: the ranks span several hosts",
                   "runtime.intra_op_threads": "cores // ranks on this host = 8 // 2",
                   "runtime.inter_op_threads": "intra-op 4 // 4, at least 2"}
    pinned = config_lib.load(None, ["horovod.cycle_time_ms=2", "runtime.intra_op_threads=1",
                                    "runtime.inter_op_threads=1"])
    assert horovod_env.auto_reasons(pinned.horovod, pinned.runtime, pinned.horovod, budget,
                                    multi_host=True, cores=8, ranks_on_host=2) == {}


def test_fp16_is_recommended_across_hosts_only_when_compression_is_off():
    line = horovod_env.compression_advice("none", multi_host=True)
    assert "horovod.compression=fp16" in line and "\n" not in line
    assert not re.search(r"\d\.\d", line), "figures live in docs/performance.md: the advice links there"
    assert "docs/performance.md#fp16-" in line
    assert horovod_env.compression_advice("fp16", multi_host=True) is None
    assert horovod_env.compression_advice("none", multi_host=False) is None


def test_the_environment_is_applied_in_one_step_replacing_an_earlier_jobs_values_and_naming_hand_set_ones():
    environ = {"HOROVOD_FUSION_THRESHOLD": "1024", "PATH": "/bin"}  # set by hand before hvdkeras
    first = {"HOROVOD_CYCLE_TIME": "5", "HOROVOD_TIMELINE": "/w1/timeline.json", "HOROVOD_FUSION_THRESHOLD": "0"}
    notes = horovod_env.apply_environment(first, environ)
    assert notes == ["HOROVOD_FUSION_THRESHOLD=1024 from the environment is used instead of the config's 0"
                     " (unset it to use the config)"]
    assert environ["HOROVOD_CYCLE_TIME"] == "5" and environ["HOROVOD_FUSION_THRESHOLD"] == "1024"
    # a second job in the same process: its own values, none of the first job's left over
    second = {"HOROVOD_CYCLE_TIME": "2"}
    assert horovod_env.apply_environment(second, environ) == []
    assert environ["HOROVOD_CYCLE_TIME"] == "2" and "HOROVOD_TIMELINE" not in environ
    assert environ["HOROVOD_FUSION_THRESHOLD"] == "1024" and environ["PATH"] == "/bin"  # not ours: untouched
    # a value changed by hand after hvdkeras set it is the user's now
    environ["HOROVOD_CYCLE_TIME"] = "7"
    assert horovod_env.apply_environment({"HOROVOD_CYCLE_TIME": "2"}, environ)[0].startswith(
        "HOROVOD_CYCLE_TIME=7 from the environment is used instead of the config's 2")



NOT_BUILT = ("Extension horovod.tensorflow has not been built: /v/lib/python3.11/site-packages/horovod/tensorflow/"
             "mpi_lib.cpython-311-x86_64-linux-gnu.so not found\nIf this is not expected, reinstall Horovod with"
             " HOROVOD_WITH_TENSORFLOW=1 to debug the build error.")
UNDEFINED = ("/v/lib/python3.11/site-packages/horovod/tensorflow/mpi_lib.cpython-311-x86_64-linux-gnu.so: undefined"
             " symbol: _ZN10tensorflow14kernel_factory17OpKernelRegistrar12InitInternalEPKNS_9KernelDefEN4absl")


@pytest.mark.parametrize("error, says", [
    (ImportError(NOT_BUILT), "Horovod's TensorFlow ops do not load in TensorFlow 2.21.0 (Extension horovod.tensorflow"
                             " has not been built: "),
    (OSError(UNDEFINED), "Horovod's TensorFlow ops do not load in TensorFlow 2.21.0 (/v/lib/"),  # TF's NotFoundError
    (ModuleNotFoundError("No module named 'horovod'", name="horovod"),
     "Horovod is not installed in this environment (No module named 'horovod'); build and install it for TensorFlow"
     " 2.21.0: python -m hvdkeras.build_horovod ("),
])
def test_a_horovod_that_does_not_load_is_one_line_naming_the_fix_and_the_page(error, says):
    line = horovod_env.horovod_load_failure(error, "2.21.0")
    assert line.startswith(says) and "\n" not in line, line
    assert line.endswith(f"({horovod_env.TROUBLESHOOTING_OPS})")
    assert "--rebuild" in line or isinstance(error, ModuleNotFoundError)


def test_another_import_failure_is_left_as_it_is():
    assert horovod_env.horovod_load_failure(ModuleNotFoundError("No module named 'yaml'", name="yaml"), "2.21") is None
    assert horovod_env.horovod_load_failure(ImportError("cannot import name 'x' from 'numpy'"), "2.21") is None
