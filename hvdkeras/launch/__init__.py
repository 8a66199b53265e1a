"""Launch recipes and the dry run: ``python -m hvdkeras.train --config FILE --dry_run --np 8 --hosts a:4,b:4``.

Neither TensorFlow nor Horovod is imported here, for any config.

:func:`plan` resolves what a job would run with, without starting it (no
``hvd.init``, no Horovod process state, no model, no files written): the world
size, the batches, the learning rate, the steps, the Horovod knobs and the
thread budget. Every number comes from the function the trainer itself calls:

==================  ==========================================================
global batch        :func:`hvdkeras.common.scaling.global_batch`
per-rank batch      :func:`hvdkeras.common.scaling.per_rank_batch` (``global // ranks``)
scaled lr           :func:`hvdkeras.common.scaling.scaled_learning_rate`, shown by
                    :func:`hvdkeras.common.scaling.formula`
warmup start lr     :func:`hvdkeras.common.scaling.warmup_start_lr`
steps per epoch     :func:`hvdkeras.common.data_sizes.steps_per_epoch`: the dataset's
                    size as written down (the packaged file, the config, a prepared
                    TFDS dataset's metadata) by the rules of :mod:`hvdkeras.common.scaling`,
                    or ``trainer.steps_per_epoch``
horovod settings    :func:`hvdkeras.common.horovod_env.resolve_horovod` and
                    :func:`hvdkeras.common.horovod_env.horovod_environment`
threads per rank    :func:`hvdkeras.common.horovod_env.thread_budget`
==================  ==========================================================

The only formulas defined here are the two step counts (see :func:`warmup_steps`
and :func:`total_steps`). A TensorFlow Datasets dataset that is not prepared in
``data.data_dir`` has no known size offline (nothing is downloaded): its steps are
reported as unknown here and counted at start, with the reason.

Modules: ``plan`` (``--hosts`` and ``--np``, then the plan), ``describe`` (the readable
block), ``commands`` (what every launcher shares, ``horovodrun`` and ``mpirun``), ``slurm``
(its script as the template files ``slurm.sbatch``, ``slurm_signals.sh`` and ``slurm_requeue.sh``),
``kubernetes``,
``render`` (:func:`render_command`, :func:`launch_file`, and :func:`dry_run`, what
``hvdkeras.train --dry_run`` prints and writes) and ``cli`` (the dry run's flags, imported by
``hvdkeras.train`` alone). ``python -m hvdkeras.launch --mpirun-flags`` prints the mpirun flags.
"""
from hvdkeras.common.errors import LaunchError
from hvdkeras.launch.commands import (
    DEFAULT_IMAGE,
    LAUNCHERS,
    MPIRUN_FLAGS,
    MPIRUN_GPU_FLAGS,
    TRAIN_MODULE,
    check_launcher,
    main,
    mpirun_flags,
)
from hvdkeras.launch.describe import describe
from hvdkeras.launch.plan import Host, Plan, hosts_text, parse_hosts, plan, total_steps, warmup_steps
from hvdkeras.launch.render import dry_run, launch_file, render_command

__all__ = ["DEFAULT_IMAGE", "LAUNCHERS", "MPIRUN_FLAGS", "MPIRUN_GPU_FLAGS", "TRAIN_MODULE", "Host", "LaunchError",
           "Plan", "check_launcher", "describe", "dry_run", "hosts_text", "launch_file", "main", "mpirun_flags",
           "parse_hosts", "plan", "render_command", "total_steps", "warmup_steps"]
