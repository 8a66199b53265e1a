"""Launch recipes and the dry run (hvdkeras/launch/): the numbers match the trainer's, the files parse."""
import dataclasses
import os
import shlex
import subprocess
import sys

import pytest

from hvdkeras import config as config_lib
from hvdkeras import launch
from hvdkeras.common import horovod_env, scaling
from hvdkeras.common.errors import ConfigError, LaunchError, SetupError
from hvdkeras.training import data as data_lib
from hvdkeras.training import optimizers
from tests.unit.helpers import REPO, SCRIPTS, config_file


def load(name, *overrides):
    return config_lib.load(config_file(name), list(overrides))


def digits_plan(**kwargs):
    kwargs.setdefault("cores_per_host", 8)
    kwargs.setdefault("train_args", ["--config", "configs/digits.yaml"])
    return launch.plan(load("digits.yaml"), 8, "a:4,b:4", **kwargs)


def trainer_lr(cfg, np_):
    """The rate the trainer builds its optimizer with (trainer.compile_model calls exactly this)."""
    return optimizers.build(cfg.optimizer, cfg.horovod, cfg.data, scaling.global_batch(cfg.data, np_))[1]


# --------------------------------------------------------------------------- numbers


def test_digits_numbers_match_the_trainer(hvd_single):
    cfg = load("digits.yaml")
    p = digits_plan()
    assert (p.np, [(h.name, h.slots) for h in p.hosts]) == (8, [("a", 4), ("b", 4)])
    assert (p.global_batch, p.per_rank_batch, p.eval_per_rank_batch) == (64, 8, 8)
    # 0.05 per 32 examples: 0.1 for the global 64 on any number of ranks, warmup from 0.05
    assert p.scaled_lr == pytest.approx(0.1) and p.scaled_lr == trainer_lr(cfg, 8) == trainer_lr(cfg, 1)
    assert p.warmup_start_lr == pytest.approx(0.05)
    assert launch.plan(load("digits.yaml"), 1, cores_per_host=8).scaled_lr == p.scaled_lr
    # Every rank of 8 gets the same count from the trainer's data code: 1438 // 64.
    for rank in (0, 7):
        assert data_lib.build(cfg.data, data_lib.Shard(rank, 8), seed=42).steps_per_epoch == p.steps_per_epoch == 22
    assert p.warmup_steps == 2 * 22 and p.total_steps == 15 * 22
    assert p.threads == ((4, horovod_env.thread_budget(8, 4)),)
    assert p.horovod.cycle_time_ms is None  # Horovod's own 1 ms
    assert p.horovod_env == horovod_env.horovod_environment(horovod_env.resolve_horovod(cfg.horovod))


def test_the_plan_calls_the_trainers_scaling_function(monkeypatch):
    calls = []
    real = scaling.scaled_learning_rate
    assert optimizers.scaled_learning_rate is real  # the function the trainer's optimizer is built with

    def spy(cfg, data, global_batch_size):
        calls.append(global_batch_size)
        return real(cfg, data, global_batch_size)

    monkeypatch.setattr(scaling, "scaled_learning_rate", spy)
    launch.plan(load("digits.yaml"), 4, cores_per_host=4)
    assert calls == [64]


def test_resnet_numbers_and_unknown_imagenet_size(tmp_path, hvd_single):
    cfg = load("resnet.yaml", f"data.data_dir={tmp_path}")  # an empty data_dir: not prepared here
    p = launch.plan(cfg, 8, "a:4,b:4", gpus_per_host=4, cores_per_host=32)
    assert (p.global_batch, p.per_rank_batch) == (1024, 128)
    assert p.scaled_lr == pytest.approx(0.1 * 1024 / 256) and p.scaled_lr == trainer_lr(cfg, 8)
    assert p.warmup_start_lr == pytest.approx(0.1)  # Goyal et al.: from 0.1 (the rate per 256) to 0.4
    assert p.steps_per_epoch is None and p.warmup_steps is None and p.total_steps is None
    assert "unknown" in p.steps_note and "imagenet2012 is not prepared" in p.steps_note
    assert "tfds build imagenet2012" in p.steps_note
    assert p.horovod.cycle_time_ms is None
    assert p.threads == ((4, horovod_env.thread_budget(32, 4)),)
    text = launch.describe(p)
    assert "steps per epoch   unknown" in text and "total steps       unknown" in text


def test_the_dry_run_prints_the_formula_marks_auto_values_and_recommends_fp16_across_hosts():
    text = launch.describe(digits_plan())
    assert "learning rate     0.1 = 0.05 x global batch 64 / optimizer.base_batch_size 32" in text
    assert "compression=none," in text and "cycle_time_ms=null," in text
    assert "note" in text and "horovod.compression=fp16 halves the gradient bytes" in text
    assert "threads per rank  intra-op 2, inter-op 2 (auto)" in text and "steps per epoch   22 (auto)" in text
    one_host = launch.describe(launch.plan(load("digits.yaml"), 2, cores_per_host=8))
    assert "halves the gradient bytes" not in one_host
    fp16 = launch.describe(launch.plan(load("digits.yaml", "horovod.compression=auto"), 8, "a:4,b:4",
                                       cores_per_host=8))
    assert "compression=fp16 (auto)" in fp16 and "compression (auto): fp16: the ranks span several hosts" in fp16


def test_the_dry_run_says_how_each_host_binds_its_ranks_to_cores():
    def row(*sets, np_=2, hosts=None, cores=8):
        text = launch.describe(launch.plan(load("digits.yaml", *sets), np_, hosts, cores_per_host=cores))
        return [line for line in text.splitlines() if line.startswith("cpu binding")][0]

    assert row() == ("cpu binding       2 ranks per host: each on its own block of 4 of the 8 cores"
                     " (auto; a binding by the launcher is kept)")
    assert "3 ranks per host: each on its own block of 2-3 of the 8 cores" in row("data.global_batch_size=63", np_=3)
    assert "4 ranks on 2 cores per host: left unbound" in row(np_=4, cores=2)
    assert "one rank per host: nothing to bind" in row(np_=2, hosts="a:1,b:1")
    assert row("runtime.cpu_binding=none").endswith("none (runtime.cpu_binding): the ranks' threads may run on"
                                                    " any of the host's cores")


def test_horovods_convention_in_the_dry_run():
    cfg = load("mnist.yaml", "data.data_dir=/nonexistent", "trainer.steps_per_epoch=10")
    p = launch.plan(cfg, 4, cores_per_host=8)
    assert (p.global_batch, p.per_rank_batch, p.scaled_lr) == (512, 128, pytest.approx(0.004))
    assert p.warmup_start_lr == pytest.approx(0.001)  # Horovod's scaled_lr / size
    assert "0.004 = 0.001 x global batch 512 (= 128 per rank x 4 ranks)" in launch.describe(p)


def test_resnet_with_steps_per_epoch_given(tmp_path):
    cfg = load("resnet.yaml", f"data.data_dir={tmp_path}", "trainer.steps_per_epoch=1251")
    p = launch.plan(cfg, 8, "a:4,b:4", gpus_per_host=4, cores_per_host=32)
    assert p.steps_per_epoch == 1251 and p.steps_note.startswith("trainer.steps_per_epoch")
    assert p.warmup_steps == 5 * 1251 and p.total_steps == 90 * 1251
    assert "steps 37530, 75060, 100080" in launch.describe(p)  # the step boundaries 30, 60, 80


def test_cifar10_resnet56_numbers(tmp_path, hvd_single):
    cfg = load("cifar10_resnet56.yaml", f"data.data_dir={tmp_path}")
    p = launch.plan(cfg, 4, cores_per_host=8)
    assert (p.global_batch, p.per_rank_batch, p.hosts) == (128, 32, (launch.Host("localhost", 4),))
    assert p.scaled_lr == pytest.approx(0.1) and p.scaled_lr == trainer_lr(cfg, 4)  # 0.1 * 128 / 128
    assert p.warmup_epochs == 0 and p.steps_per_epoch is None and "cifar10 is not prepared" in p.steps_note
    assert "tfds build cifar10" in p.steps_note
    assert "warmup            none" in launch.describe(p)


def test_known_split_size_of_a_prepared_tfds_dataset(tmp_path):
    sys.path.insert(0, SCRIPTS)
    try:
        import tiny_tfds  # registers the hvdkeras_tiny builder
    finally:
        sys.path.remove(SCRIPTS)
    tiny_tfds.prepare(str(tmp_path))
    cfg = load("cifar10_resnet56.yaml", "data.name=hvdkeras_tiny", f"data.data_dir={tmp_path}",
               "data.global_batch_size=8")
    p = launch.plan(cfg, 2, cores_per_host=2)
    assert p.steps_per_epoch == scaling.steps_per_epoch(tiny_tfds.TRAIN, 8, 2) == 6  # (52 // 2) // 4
    assert p.steps_note.startswith("hvdkeras_tiny[train]")
    assert p.total_steps == 164 * 6


# --------------------------------------------------------------------------- commands and files


def test_horovodrun_command_follows_the_readme():
    assert launch.render_command(digits_plan(), "horovodrun") == (
        "horovodrun -np 8 -H a:4,b:4 --gloo python -m hvdkeras.train --config configs/digits.yaml")
    gpu = digits_plan(gpus_per_host=4)
    assert launch.render_command(gpu, "horovodrun").startswith("horovodrun -np 8 -H a:4,b:4 python -m")


def test_user_arguments_are_shell_quoted():
    p = launch.plan(load("digits.yaml"), 2, cores_per_host=2,
                    train_args=["--config", "configs/digits.yaml", "--set", "data.image_shape=[8, 8, 1]"])
    assert launch.render_command(p).endswith("--set 'data.image_shape=[8, 8, 1]'")


def test_elastic_horovodrun_uses_host_discovery():
    cfg = load("digits.yaml", "elastic.enabled=true", "elastic.min_np=4", "elastic.max_np=12")
    p = launch.plan(cfg, 8, "a:4,b:4", cores_per_host=8, train_args=["--config", "configs/digits.yaml"])
    *comments, first, second = launch.render_command(p, "horovodrun").splitlines()
    assert comments and all(c.startswith("# ") for c in comments) and "ServerAliveInterval" in comments[1]
    assert first == "printf 'a:4\\nb:4\\n' > hosts.txt"
    assert second.startswith("HVDKERAS_HOSTS_FILE=hosts.txt horovodrun -np 8 --min-np 4 --max-np 12"
                             " --host-discovery-script 'python -m hvdkeras.discover_hosts' python -m hvdkeras.train")
    with pytest.raises(LaunchError, match="elastic.enabled=true runs only under horovodrun"):
        launch.render_command(p, "mpirun")


def test_mpirun_command_is_horovods_recipe():
    assert launch.render_command(digits_plan(), "mpirun") == (
        "mpirun -np 8 -H a:4,b:4 -bind-to none -map-by slot -mca pml ob1 -mca btl ^openib -x PATH"
        " -x LD_LIBRARY_PATH -x TF_CPP_MIN_LOG_LEVEL python -m hvdkeras.train --config configs/digits.yaml")
    # GPU hosts: NCCL also says which transport it picked
    assert launch.render_command(digits_plan(gpus_per_host=4), "mpirun") == (
        "mpirun -np 8 -H a:4,b:4 -bind-to none -map-by slot -mca pml ob1 -mca btl ^openib -x PATH"
        " -x LD_LIBRARY_PATH -x TF_CPP_MIN_LOG_LEVEL -x NCCL_DEBUG=INFO python -m hvdkeras.train"
        " --config configs/digits.yaml")


@pytest.mark.parametrize("argv, gpus", [(["--mpirun-flags"], False), (["--mpirun-flags", "--gpus"], True)])
def test_mpirun_flags_for_the_makefile(capsys, argv, gpus):
    assert launch.main(argv) == 0
    printed = capsys.readouterr().out
    assert shlex.split(printed) == list(launch.mpirun_flags(gpus))
    assert ("-x NCCL_DEBUG=INFO" in printed) == gpus
    assert launch.mpirun_flags(False) == launch.MPIRUN_FLAGS == (
        "-bind-to", "none", "-map-by", "slot", "-mca", "pml", "ob1", "-mca", "btl", "^openib",
        "-x", "PATH", "-x", "LD_LIBRARY_PATH", "-x", "TF_CPP_MIN_LOG_LEVEL")
    assert launch.mpirun_flags(True) == launch.MPIRUN_FLAGS + ("-x", "NCCL_DEBUG=INFO")


@pytest.mark.parametrize("argv, says", [
    ([], "--mpirun-flags is required: python -m hvdkeras.launch --mpirun-flags [--gpus] prints the mpirun flags"),
    (["--mpirun-flags", "--gpu"], "Unknown command line flag 'gpu'"),
    (["--mpirun-flags", "extra"], "unexpected arguments extra; usage: python -m hvdkeras.launch --mpirun-flags"),
])
def test_mpirun_flags_command_line_errors_are_one_line_with_status_2(capsys, argv, says):
    with pytest.raises(SystemExit) as stopped:
        launch.main(argv)
    assert stopped.value.code == 2
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert line.startswith(f"hvdkeras: error: {says}") and captured.out == ""


def test_slurm_script_counts_and_command(tmp_path):
    script = launch.render_command(digits_plan(), "slurm")
    lines = script.splitlines()
    assert lines[0] == "#!/bin/bash"
    for directive in ("--nodes=2", "--ntasks-per-node=4", "--cpus-per-task=2", "--job-name=hvdkeras-digits",
                      "--output=hvdkeras-digits-%j.out"):
        assert f"#SBATCH {directive}" in lines
    assert not any("--gpus-per-node" in line for line in lines)  # CPU hosts
    assert any(line.startswith("# Launcher: horovodrun") for line in lines)  # the choice, in a comment
    # preemption (on by default): horovodrun in the background of a shell that passes Slurm's signals on
    assert ('  horovodrun -np 8 -H "${HOSTS}" --gloo python -m hvdkeras.train --config configs/digits.yaml &'
            in lines)
    assert 'sed "s/$/:4/"' in script
    # SIGUSR1 the checkpoint grace (30 s) plus 30 s before the time limit; it requeues, SIGTERM does not
    for directive in ("--signal=B:USR1@60", "--requeue", "--open-mode=append"):
        assert f"#SBATCH {directive}" in lines
    assert "trap 'REQUEUE=1; stop' USR1" in lines and "trap stop TERM" in lines
    assert lines[-2:] == ['if [ -n "${REQUEUE}" ]; then scontrol requeue "${SLURM_JOB_ID}"; fi', 'exit "${STATUS}"']
    assert "source " not in script or any(line.startswith("source ") and "/bin/activate" in line for line in lines)
    off = digits_plan()
    off = dataclasses.replace(off, config=dataclasses.replace(
        off.config, checkpoint=dataclasses.replace(off.config.checkpoint, preemption=False)))
    plain = launch.render_command(off, "slurm")
    assert "#SBATCH --signal" not in plain and "trap" not in plain
    # without preemption, exec: horovodrun is the batch shell and gets Slurm's signals itself
    assert plain.splitlines()[-1] == ('exec horovodrun -np 8 -H "${HOSTS}" --gloo python -m hvdkeras.train'
                                      ' --config configs/digits.yaml')
    # All #SBATCH lines come before the first command (sbatch stops reading them there).
    first_command = next(i for i, line in enumerate(lines) if line and not line.startswith("#"))
    assert max(i for i, line in enumerate(lines) if line.startswith("#SBATCH")) < first_command
    path = tmp_path / "job.sbatch"
    path.write_text(script)
    assert subprocess.run(["bash", "-n", str(path)]).returncode == 0
    gpu = launch.render_command(digits_plan(gpus_per_host=4), "slurm")
    assert "#SBATCH --gpus-per-node=4" in gpu and "--gloo" not in gpu


def _requeue_shell(tmp_path, before_run: str):
    """The generated script's signal handling, as bash runs it: its traps, ``before_run`` (the slow part of a start:
    ``source``, ``scontrol show hostnames``), and its run part, with a fake launcher that notes each SIGTERM and
    exits 75 on it, and a fake ``scontrol`` on PATH that notes the requeue."""
    import string

    from hvdkeras.launch import slurm as slurm_launch

    notes = tmp_path / "notes"
    runner = tmp_path / "runner"
    # its trap before its "started": a test that signals once it reads "started" got bash's default for SIGTERM
    # when the signal came between the two lines (status 143, no TERM noted; seen once in a fresh clone)
    runner.write_text(f"#!/bin/bash\ntrap 'echo TERM >> {notes}; sleep 0.2; exit 75' TERM\n"
                      f"echo started >> {notes}\nsleep 30 & wait $!\n")
    scontrol = tmp_path / "bin" / "scontrol"
    scontrol.parent.mkdir()
    scontrol.write_text(f'#!/bin/bash\necho "scontrol $*" >> {notes}\n')
    for path in (runner, scontrol):
        path.chmod(0o755)
    parts = [string.Template(open(os.path.join(slurm_launch.HERE, name)).read()) for name in
             ("slurm_signals.sh", "slurm_requeue.sh")]
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\nset -euo pipefail\n" + parts[0].substitute(runner="runner") + before_run + "\n"
                      + parts[1].substitute(runner="runner", command=str(runner)))
    env = dict(os.environ, PATH=f"{scontrol.parent}{os.pathsep}{os.environ['PATH']}", SLURM_JOB_ID="7")
    return subprocess.Popen(["bash", str(script)], env=env), notes


def _notes(path):
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.parametrize("when", ["while it runs", "while the job starts"])
def test_the_time_limits_signal_stops_the_launcher_once_and_requeues_whenever_it_comes(tmp_path, when):
    import signal
    import time

    ready = tmp_path / "traps-set"  # the job shell past its traps, in the sleep before the run part
    proc, notes = _requeue_shell(tmp_path, f"touch {ready}; sleep 1" if when == "while the job starts" else "")
    deadline = time.time() + 10
    if when == "while it runs":
        while "started" not in _notes(notes) and time.time() < deadline:
            time.sleep(0.05)
    else:  # not a fixed 0.3 s: a busy machine's bash may not have set its traps by then (USR1 would end it)
        while not ready.exists() and time.time() < deadline:
            time.sleep(0.02)
    proc.send_signal(signal.SIGUSR1)
    status = proc.wait(timeout=20)
    if when == "while it runs":  # one SIGTERM, the launcher's own status, then the requeue
        assert (_notes(notes), status) == (["started", "TERM", "scontrol requeue 7"], 75)
    else:  # the launcher never starts; the job requeues (before the fix bash's default ended it, unrequeued)
        assert (_notes(notes), status) == (["scontrol requeue 7"], 0)


def test_a_sigterm_stops_the_launcher_without_a_requeue(tmp_path):
    import signal
    import time

    proc, notes = _requeue_shell(tmp_path, "")
    deadline = time.time() + 10
    while "started" not in _notes(notes) and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 75 and _notes(notes) == ["started", "TERM"]


def test_slurm_srun_script_lets_srun_start_the_ranks(tmp_path):
    script = launch.render_command(digits_plan(), "slurm-srun")
    lines = script.splitlines()
    assert "  srun --mpi=pmix python -m hvdkeras.train --config configs/digits.yaml &" in lines
    assert "horovodrun" not in "\n".join(line for line in lines if not line.startswith("#"))
    assert "HOSTS=" not in script  # srun places the ranks itself
    for directive in ("--nodes=2", "--ntasks-per-node=4", "--signal=B:USR1@60", "--requeue"):
        assert f"#SBATCH {directive}" in lines
    path = tmp_path / "job.sbatch"
    path.write_text(script)
    assert subprocess.run(["bash", "-n", str(path)]).returncode == 0


def test_dry_run_writes_only_the_launch_file(tmp_path, monkeypatch):
    import horovod.tensorflow as hvd

    def no_init(*args, **kwargs):
        raise AssertionError("hvd.init called by a dry run")

    monkeypatch.setattr(hvd, "init", no_init)
    monkeypatch.chdir(REPO)
    out = tmp_path / "job.sbatch"
    text = launch.dry_run("configs/digits.yaml", ["trainer.epochs=3"], workdir=str(tmp_path / "wd"), np=4,
                          launcher="slurm", cores_per_host=4, output=str(out))
    assert "total steps       66 = 3 epochs x 22" in text  # (1438 // 4) // 16 = 22
    assert out.read_text() in text and "--set trainer.epochs=3 --workdir" in out.read_text()
    assert os.listdir(tmp_path) == ["job.sbatch"]  # no workdir, no checkpoints


# --------------------------------------------------------------------------- errors


def test_np_and_hosts_must_agree():
    with pytest.raises(LaunchError) as err:
        launch.plan(load("digits.yaml"), 6, "a:4,b:4")
    message = str(err.value)
    assert "--np 6" in message and "--hosts a:4,b:4" in message and "\n" not in message


def test_np_defaults_to_the_hosts_slots_else_one():
    assert launch.plan(load("digits.yaml"), None, "a:3,b", cores_per_host=2).np == 4  # b: 1 slot
    assert launch.plan(load("digits.yaml"), cores_per_host=2).np == 1


def test_bad_launcher_lists_the_valid_ones():
    valid = "horovodrun, mpirun, slurm, slurm-srun, kubernetes, ray"
    with pytest.raises(LaunchError, match=f"^--launcher pbs is not one of {valid}$"):
        launch.render_command(digits_plan(), "pbs")


@pytest.mark.parametrize("hosts", ["a:0", "a:x", ":4", "a:4,a:4"])
def test_bad_hosts(hosts):
    with pytest.raises(LaunchError, match="--hosts"):
        launch.parse_hosts(hosts)


def test_what_the_trainer_would_refuse():
    with pytest.raises(ConfigError, match="must be divisible by the 3 ranks"):
        launch.plan(load("digits.yaml"), 3)
    with pytest.raises(SetupError, match="local rank 4 has no GPU"):
        launch.plan(load("digits.yaml"), 8, "a:8", gpus_per_host=4)


def test_uneven_hosts_need_horovodrun_or_mpirun():
    p = launch.plan(load("digits.yaml"), 8, "a:6,b:2", cores_per_host=8)
    assert "-H a:6,b:2" in launch.render_command(p, "horovodrun")
    for launcher in ("slurm", "slurm-srun", "kubernetes"):
        with pytest.raises(LaunchError, match="same number of processes on every host"):
            launch.render_command(p, launcher)


def test_the_ray_launch_says_what_it_asks_ray_for_and_its_one_command():
    from hvdkeras.launch.ray import RayOptions

    p = launch.plan(load("digits.yaml"), 4, cores_per_host=2, train_args=["--config", "configs/digits.yaml"])
    text = launch.render_command(p, "ray", ray=RayOptions(address="10.0.0.1:6379", cpus_per_worker=2, max_retries=1))
    comment, command = text.splitlines()
    assert comment == ("# asks Ray for 4 workers of 2 CPU each (one placement group, strategy PACK); restarts after a"
                       " lost worker: 1")
    assert shlex.split(command)[-10:] == ["--launcher", "ray", "--address", "10.0.0.1:6379", "--np", "4",
                                          "--cpus_per_worker", "2", "--max_retries", "1"]
    assert "ray: one Ray actor per rank" in launch.describe(p, "ray")


def test_the_ray_launcher_refuses_a_changed_config_on_the_driver_before_it_asks_for_a_cluster(tmp_path):
    """The workdir holds a checkpoint of the digits job; the address answers nobody: the line is the workdir's."""
    from hvdkeras.common.workdir import save_config

    workdir = tmp_path / "w"
    (workdir / "checkpoints" / "epoch-0001").mkdir(parents=True)
    save_config(load("digits.yaml"), str(workdir / "config.yaml"))
    proc = subprocess.run([sys.executable, "-m", "hvdkeras.train", "--config", "configs/digits.yaml", "--workdir",
                           str(workdir), "--launcher", "ray", "--np", "2", "--address", "127.0.0.1:9",
                           "--set", "optimizer.learning_rate=0.5"], capture_output=True, text=True, timeout=60,
                          cwd=REPO)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 2 and last.startswith(f"hvdkeras: error: --workdir {workdir} holds checkpoints"
                                                    " trained with another config (optimizer.learning_rate:"), last


def test_ray_flags_without_the_ray_launcher_and_the_ray_launcher_without_np_are_one_line(tmp_path):
    for args, says in ((["--address", "auto"], "--address only applies with --launcher ray"),
                       (["--launcher", "ray"], "--launcher ray needs --np N, the number of ranks, e.g. --np 2"),
                       (["--launcher", "ray", "--np", "2", "--hosts", "a:2"],
                        "--hosts only applies with --dry_run")):
        proc = subprocess.run([sys.executable, "-m", "hvdkeras.train", "--config", "configs/digits.yaml",
                               "--workdir", str(tmp_path / "w")] + args, capture_output=True, text=True, timeout=60,
                              cwd=REPO)
        assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1].startswith(f"hvdkeras: error: {says}")
