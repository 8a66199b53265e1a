"""Launch recipes and the dry run: ``python -m hvdkeras.train --config FILE --dry_run --np 8 --hosts a:4,b:4``.

:func:`plan` resolves what a job would run with, without starting it (no
``hvd.init``, no Horovod process state, no model, no files written): the world
size, the batches, the learning rate, the steps, the Horovod knobs and the
thread budget. Every number comes from the function the trainer itself calls:

==================  ==========================================================
global batch        :func:`hvdkeras.scaling.global_batch`
per-rank batch      :func:`hvdkeras.scaling.per_rank_batch` (``global // ranks``)
scaled lr           :func:`hvdkeras.scaling.scaled_learning_rate`, shown by
                    :func:`hvdkeras.scaling.formula`
warmup start lr     :func:`hvdkeras.scaling.warmup_start_lr`
steps per epoch     :func:`hvdkeras.data.build` for rank 0 of ``np`` (the count is
                    the same on every rank: ``(examples // ranks) // per_rank_batch``),
                    or ``trainer.steps_per_epoch``
horovod settings    :func:`hvdkeras.horovod_env.resolve_horovod` and
                    :func:`hvdkeras.horovod_env.horovod_environment`
threads per rank    :func:`hvdkeras.horovod_env.thread_budget`
==================  ==========================================================

The only formulas defined here are the two step counts (see :func:`warmup_steps`
and :func:`total_steps`). A TensorFlow Datasets dataset that is not prepared in
``data.data_dir`` has no known size offline (nothing is downloaded): its steps are
reported as unknown, with the one-line reason the trainer would stop with.

:func:`render_command` turns a plan into the exact command or file for a
launcher (``horovodrun``, ``mpirun``, ``slurm``, ``kubernetes``);
:func:`describe` into a readable block; :func:`dry_run` is what
``hvdkeras.train --dry_run`` calls.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import os
import re
import shlex
import sys
from typing import Dict, Optional, Sequence, Tuple, Union

import yaml

from hvdkeras import config as config_lib
from hvdkeras import data_sizes, discover_hosts, horovod_env, scaling
from hvdkeras.errors import ConfigError, LaunchError

LAUNCHERS = ("horovodrun", "mpirun", "slurm", "slurm-srun", "kubernetes")
DEFAULT_IMAGE = "hvdkeras:latest"
TRAIN_MODULE = ("python", "-m", "hvdkeras.train")
# Horovod's documented Open MPI recipe (docs/mpi.rst), without -np and -H: the one copy, used by the dry
# run, `make train LAUNCHER=mpirun` (python -m hvdkeras.launch --mpirun-flags) and the test harness.
MPIRUN_FLAGS = ("-bind-to", "none", "-map-by", "slot", "-mca", "pml", "ob1", "-mca", "btl", "^openib",
                "-x", "PATH", "-x", "LD_LIBRARY_PATH", "-x", "TF_CPP_MIN_LOG_LEVEL")
MPIRUN_GPU_FLAGS = ("-x", "NCCL_DEBUG=INFO")  # GPU hosts: NCCL says which transport it picked


def mpirun_flags(gpus: bool = False) -> Tuple[str, ...]:
    """The flags of Horovod's Open MPI recipe, plus NCCL's transport report on GPU hosts."""
    return MPIRUN_FLAGS + (MPIRUN_GPU_FLAGS if gpus else ())


# --------------------------------------------------------------------------- hosts


@dataclasses.dataclass(frozen=True)
class Host:
    name: str
    slots: int  # processes on this host


def parse_hosts(text: str) -> Tuple[Host, ...]:
    """``"a:4,b:4"`` -> (Host("a", 4), Host("b", 4)); a host without ``:slots`` has 1 slot (as in horovodrun)."""
    hosts = []
    for entry in text.split(","):
        entry = entry.strip()
        name, _, slots = entry.partition(":")
        if not name or (slots and not (slots.isdigit() and int(slots) > 0)):
            raise LaunchError(f"--hosts entry {entry!r} in --hosts {text} must be host or host:slots with slots >= 1"
                              " (e.g. --hosts a:4,b:4)")
        if any(h.name == name for h in hosts):
            raise LaunchError(f"--hosts {text} lists {name} twice; give each host once with its slots")
        hosts.append(Host(name, int(slots) if slots else 1))
    return tuple(hosts)


def hosts_text(hosts: Sequence[Host]) -> str:
    """The ``-H`` value: ``a:4,b:4``."""
    return ",".join(f"{h.name}:{h.slots}" for h in hosts)


# --------------------------------------------------------------------------- the plan


@dataclasses.dataclass(frozen=True)
class Plan:
    """Everything a job would run with, resolved without starting it."""

    config: config_lib.Config
    train_args: Tuple[str, ...]  # the arguments of python -m hvdkeras.train on every rank
    np: int  # world size
    hosts: Tuple[Host, ...]
    gpus_per_host: int  # 0: CPU hosts
    cores_per_host: int
    # Batches (examples per optimizer step).
    global_batch: int
    per_rank_batch: int
    eval_global_batch: int
    eval_per_rank_batch: int
    # Learning rate.
    base_lr: float  # optimizer.learning_rate, the rate of the reference batch
    scaled_lr: float  # what the optimizer gets
    warmup_start_lr: float  # the rate of the first warmup batch
    warmup_epochs: float
    # Steps (None: unknown, see steps_note).
    epochs: int
    steps_per_epoch: Optional[int]
    steps_note: str  # where steps_per_epoch comes from, or why it is unknown
    warmup_steps: Optional[int]
    total_steps: Optional[int]
    # Horovod and threads.
    horovod: config_lib.HorovodConfig  # resolved for the hosts (automatic knobs filled in)
    horovod_env: Dict[str, str]
    threads: Tuple[Tuple[int, object], ...]  # (ranks on a host, horovod_env.ThreadBudget), one per distinct count

    @property
    def uniform_slots(self) -> Optional[int]:
        """Processes per host when every host runs the same number, else None."""
        counts = {h.slots for h in self.hosts}
        return counts.pop() if len(counts) == 1 else None


def warmup_steps(warmup_epochs: float, steps_per_epoch: int) -> int:
    """Batches run below the scaled rate: ``ceil(warmup_epochs * steps_per_epoch)``.

    The warmup callback sets the rate of batch ``b`` of epoch ``e`` at the fractional
    epoch ``e + b / steps_per_epoch`` and reaches the scaled rate at ``warmup_epochs``.
    """
    return math.ceil(warmup_epochs * steps_per_epoch)


def total_steps(epochs: int, steps_per_epoch: int) -> int:
    """Optimizer steps of the whole run on every rank: ``epochs * steps_per_epoch``."""
    return epochs * steps_per_epoch


def _world(np_: Optional[int], hosts: Union[None, str, Sequence[Host]]) -> Tuple[int, Tuple[Host, ...]]:
    """The world size and hosts: ``np`` defaults to the hosts' slots (else 1), hosts to ``localhost:np``."""
    hosts_given = hosts is not None and hosts != ""
    parsed = (parse_hosts(hosts) if isinstance(hosts, str) else tuple(hosts)) if hosts_given else ()
    if np_ is not None and np_ < 1:
        raise LaunchError(f"--np must be >= 1; received: {np_}")
    if not parsed:
        n = np_ or 1
        return n, (Host("localhost", n),)
    slots = sum(h.slots for h in parsed)
    if np_ is not None and np_ != slots:
        raise LaunchError(f"--np {np_} does not match --hosts {hosts_text(parsed)} ({slots} slots); "
                          f"pass --np {slots} or change --hosts")
    return slots, parsed


def _steps_per_epoch(cfg: config_lib.Config, np_: int) -> Tuple[Optional[int], str]:
    """(steps per epoch or None, where it comes from or why it is unknown); sizes only (:mod:`hvdkeras.data_sizes`)."""
    steps, note = data_sizes.steps_per_epoch(cfg, np_)
    if steps == 0:
        examples, source = data_sizes.train_examples(scaling.for_world(cfg.data, np_))
        raise ConfigError(f"data.global_batch_size={scaling.global_batch(cfg.data, np_)} is larger than the"
                          f" {examples} training examples of {source}; use a smaller global batch")
    return steps, note


def plan(config: config_lib.Config, np: Optional[int] = None, hosts: Union[None, str, Sequence[Host]] = None, *,
         gpus_per_host: int = 0, cores_per_host: Optional[int] = None, train_args: Sequence[str] = (),
         workdir: Optional[str] = None) -> Plan:
    """Resolves ``config`` for ``np`` processes on ``hosts`` (``"a:4,b:4"``) without starting anything.

    ``cores_per_host`` defaults to this machine's cores; ``workdir`` places relative
    timeline and autotune-log paths as the trainer would. Raises :class:`ConfigError`
    (or :class:`LaunchError`) with one line for anything the trainer would refuse.
    """
    np_, hosts_ = _world(np, hosts)
    if gpus_per_host < 0:
        raise LaunchError(f"--gpus_per_host must be >= 0 (0: CPU hosts); received: {gpus_per_host}")
    if gpus_per_host:  # one GPU per process: the trainer's own check, for the first local rank without one
        fullest = max(h.slots for h in hosts_)
        horovod_env.select_local_gpu(list(range(gpus_per_host)), min(fullest, gpus_per_host + 1) - 1)
    cores = cores_per_host if cores_per_host is not None else horovod_env.host_cores()
    if cores < 1:
        raise LaunchError(f"--cores_per_host must be >= 1; received: {cores}")
    cfg = config
    config_lib.validate_for_world(cfg, np_)
    d, o, s = cfg.data, cfg.optimizer, cfg.schedule
    global_batch, eval_global = scaling.global_batch(d, np_), scaling.eval_global_batch(d, np_)
    scaled = scaling.scaled_learning_rate(o, d, global_batch)
    steps, note = _steps_per_epoch(cfg, np_)
    resolved = horovod_env.resolve_horovod(cfg.horovod, multi_host=len(hosts_) > 1)
    threads = tuple((n, horovod_env.thread_budget(cores, n, cfg.runtime.intra_op_threads, cfg.runtime.inter_op_threads))
                    for n in sorted({h.slots for h in hosts_}, reverse=True))
    return Plan(
        config=cfg, train_args=tuple(train_args), np=np_, hosts=hosts_, gpus_per_host=gpus_per_host,
        cores_per_host=cores,
        global_batch=global_batch, per_rank_batch=scaling.per_rank_batch(global_batch, np_),
        eval_global_batch=eval_global, eval_per_rank_batch=scaling.per_rank_batch(eval_global, np_),
        base_lr=o.learning_rate, scaled_lr=scaled,
        warmup_start_lr=scaling.warmup_start_lr(o, scaled),
        warmup_epochs=s.warmup_epochs, epochs=cfg.trainer.epochs, steps_per_epoch=steps, steps_note=note,
        warmup_steps=warmup_steps(s.warmup_epochs, steps) if steps else None,
        total_steps=total_steps(cfg.trainer.epochs, steps) if steps else None,
        horovod=resolved, horovod_env=horovod_env.horovod_environment(resolved, workdir), threads=threads,
    )


# --------------------------------------------------------------------------- commands and files


def check_launcher(launcher: str) -> None:
    if launcher not in LAUNCHERS:
        raise LaunchError(f"--launcher {launcher} is not one of {', '.join(LAUNCHERS)}")


def _shell(fixed: Sequence[str], user: Sequence[str] = ()) -> str:
    """Fixed tokens as written (Horovod's recipes), user-given ones shell-quoted."""
    return " ".join(list(fixed) + [shlex.quote(a) for a in user])


def _uses_gloo(p: Plan) -> bool:
    """``horovodrun --gloo`` on CPU hosts, as every CPU example in the README (the default install builds
    Horovod with Gloo only); GPU hosts follow the GPU example of docs/launching.md (horovodrun picks the controller)."""
    return p.gpus_per_host == 0


def _job_name(p: Plan) -> str:
    config = next((p.train_args[i + 1] for i, a in enumerate(p.train_args[:-1]) if a == "--config"), "job")
    stem = os.path.splitext(os.path.basename(config))[0]
    return "hvdkeras-" + (re.sub(r"[^a-z0-9-]+", "-", stem.lower()).strip("-") or "job")


def _need_uniform(p: Plan, launcher: str) -> int:
    slots = p.uniform_slots
    if slots is None:
        raise LaunchError(f"--launcher {launcher} runs the same number of processes on every host; --hosts "
                          f"{hosts_text(p.hosts)} differ (use horovodrun or mpirun, or equal slots)")
    return slots


def _no_elastic(p: Plan, launcher: str) -> None:
    if p.config.elastic.enabled:
        raise LaunchError(f"elastic.enabled=true runs only under horovodrun (Horovod's elastic driver), not --launcher"
                          f" {launcher}; use --launcher horovodrun or --set elastic.enabled=false")


def horovodrun_command(p: Plan) -> str:
    """``horovodrun -np N -H a:4,b:4 [--gloo] python -m hvdkeras.train ...`` (README's recipe).

    With ``elastic.enabled``: README's elastic recipe, a hosts file read by
    ``python -m hvdkeras.discover_hosts`` and ``--min-np``/``--max-np`` from the config.
    """
    e = p.config.elastic
    if e.enabled:
        lines = "".join(f"{h.name}:{h.slots}\\n" for h in p.hosts)
        limits = ["--min-np", str(e.min_np)] + (["--max-np", str(e.max_np)] if e.max_np else [])
        keepalive = ("# across hosts, ssh keepalives let the driver drop a host whose link is down:\n"
                     "# ServerAliveInterval 3 and ServerAliveCountMax 3 in ~/.ssh/config (docs/elastic.md)\n"
                     if len(p.hosts) > 1 else "")
        discovery = ["--host-discovery-script", shlex.quote(discover_hosts.COMMAND)]
        return (keepalive + f"printf '{lines}' > hosts.txt\n"
                + _shell(["HVDKERAS_HOSTS_FILE=hosts.txt", "horovodrun", "-np", str(p.np)] + limits
                         + discovery + list(TRAIN_MODULE), p.train_args))
    fixed = ["horovodrun", "-np", str(p.np), "-H", hosts_text(p.hosts)] + (["--gloo"] if _uses_gloo(p) else [])
    return _shell(fixed + list(TRAIN_MODULE), p.train_args)


def mpirun_args(p: Plan, hosts: bool = True) -> list:
    """Horovod's Open MPI recipe (docs/mpi.rst) for the plan, as a list (``-H`` only when ``hosts``)."""
    return (["mpirun", "-np", str(p.np)] + (["-H", hosts_text(p.hosts)] if hosts else [])
            + list(mpirun_flags(p.gpus_per_host > 0))
            + list(TRAIN_MODULE) + list(p.train_args))


def mpirun_command(p: Plan) -> str:
    _no_elastic(p, "mpirun")
    args = mpirun_args(p)
    return _shell(args[:len(args) - len(p.train_args)], p.train_args)


def venv_activate() -> str:
    """The line that activates the venv this dry run runs in ('' outside a venv): relative to the
    current folder (the checkout, where ``sbatch`` is run and the job starts) when it is inside it."""
    if sys.prefix == sys.base_prefix:
        return ""
    rel = os.path.relpath(sys.prefix)
    return f"source {shlex.quote(sys.prefix if rel.startswith('..') else rel)}/bin/activate"


def slurm_script(p: Plan, srun: bool = False) -> str:
    """An ``sbatch`` script: one node per host, ``--ntasks-per-node`` processes each.

    Default: horovodrun inside (Horovod documents ``horovodrun -np N -H host:slots``, and it
    works with a Gloo-only Horovod, the default install), with the nodes Slurm allocated as
    hosts. ``srun=True`` (``--launcher slurm-srun``): Slurm starts every rank itself with
    ``srun --mpi=pmix``, no ssh between nodes; needs Horovod built with MPI against an Open MPI
    with PMIx.
    """
    launcher = "slurm-srun" if srun else "slurm"
    _no_elastic(p, launcher)
    slots = _need_uniform(p, launcher)
    budget = dict(p.threads)[slots]
    name = _job_name(p)
    activate = venv_activate()
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={name}",
        f"#SBATCH --nodes={len(p.hosts)}",
        f"#SBATCH --ntasks-per-node={slots}",
        f"#SBATCH --cpus-per-task={budget.intra_op}",
    ]
    if p.gpus_per_host:
        lines.append(f"#SBATCH --gpus-per-node={p.gpus_per_host}")
    ckpt = p.config.checkpoint
    preemption = ckpt.enabled and ckpt.preemption
    if preemption:
        # SIGUSR1 to the batch shell (B:) ahead of the time limit: it passes a SIGTERM to horovodrun, which
        # forwards it to the ranks; they stop at one batch and checkpoint; the lead covers that and Slurm's
        # slack (its signal timer is checked about once a minute). Then the job requeues itself.
        lead = max(60, int(math.ceil(ckpt.preemption_grace_s)) + 30)
        lines += [f"#SBATCH --signal=B:USR1@{lead}",
                  "#SBATCH --requeue",
                  "#SBATCH --open-mode=append"]
    lines += [
        f"#SBATCH --output={name}-%j.out",
        f"# hvdkeras: {p.np} processes = {len(p.hosts)} node(s) x {slots}; generated by python -m hvdkeras.train"
        " --dry_run.",
    ]
    if srun:
        lines += [
            "# Launcher: srun starts every rank on the allocated nodes; Horovod's MPI controller (PMIx) connects",
            "# them: needs Horovod built with MPI (`horovodrun --check-build`); --launcher slurm uses horovodrun.",
        ]
    else:
        lines += [
            "# Launcher: horovodrun, started once on the first node, starts the ranks on every allocated node over"
            " ssh",
            "# (Horovod's documented `horovodrun -np N -H host:slots` form; works with a Gloo-only Horovod build).",
            "# With Horovod built with MPI, --launcher slurm-srun writes the `srun --mpi=pmix` form.",
        ]
    lines += [
        "# Slurm chooses the nodes" + (f" (add #SBATCH --nodelist={','.join(h.name for h in p.hosts)} to pin"
                                       " the --hosts names)." if p.hosts[0].name != "localhost" else "."),
        "set -euo pipefail",
        'cd "${SLURM_SUBMIT_DIR}"',
        activate + "  # the same venv path on every node (README)" if activate else
        "# python and horovodrun from PATH, the same on every node",
    ]
    if srun:
        command = ["srun", "--mpi=pmix", "python"] + list(TRAIN_MODULE)[1:]
    else:
        lines.append(f'HOSTS=$(scontrol show hostnames "${{SLURM_JOB_NODELIST}}" | sed "s/$/:{slots}/" | paste -sd, -)')
        command = (["horovodrun", "-np", str(p.np), "-H", '"${HOSTS}"'] + (["--gloo"] if _uses_gloo(p) else [])
                   + list(TRAIN_MODULE))
    runner = command[0]
    if not preemption:
        lines.append(_shell(["exec"] + command, p.train_args))
        return "\n".join(lines) + "\n"
    lines += [
        "# SIGUSR1 (--signal above, or `scancel --batch --signal=USR1 <jobid>`): the time limit is near. SIGTERM",
        f"# goes to {runner}, which forwards it to every rank; they stop at one batch with a checkpoint (status",
        "# 75), and the job requeues itself: the next run resumes at that batch. SIGTERM (`scancel <jobid>`)",
        "# is passed on the same way, without the requeue.",
        "REQUEUE=",
        "SIGNALLED=",
        'stop() { SIGNALLED=1; if [ -n "${HVD:-}" ]; then kill -TERM "${HVD}" 2>/dev/null || true; fi; }',
        "trap 'REQUEUE=1; stop' USR1",
        "trap stop TERM",
        _shell(command, p.train_args) + " &",
        "HVD=$!",
        'STATUS=0; wait "${HVD}" || STATUS=$?',
        f'if [ -n "${{SIGNALLED}}" ]; then STATUS=0; wait "${{HVD}}" || STATUS=$?; fi  # {runner}\'s own exit',
        'if [ -n "${REQUEUE}" ]; then scontrol requeue "${SLURM_JOB_ID}"; fi',
        'exit "${STATUS}"',
    ]
    return "\n".join(lines) + "\n"


def kubernetes_manifest(p: Plan, image: str = DEFAULT_IMAGE) -> str:
    """A Kubeflow MPI Operator ``MPIJob`` (``kubeflow.org/v2beta1``): one worker pod per host.

    ``slotsPerWorker`` processes per worker pod; the launcher runs Horovod's
    ``mpirun`` recipe (the operator provides the host file, so no ``-H``).
    """
    _no_elastic(p, "kubernetes")
    slots = _need_uniform(p, "kubernetes")
    name = _job_name(p)
    limits: Dict[str, object] = {"cpu": p.cores_per_host}
    if p.gpus_per_host:
        limits["nvidia.com/gpu"] = p.gpus_per_host
    launcher_args = mpirun_args(p, hosts=False)
    launcher_args.insert(3, "--allow-run-as-root")
    manifest = {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": name},
        "spec": {
            "slotsPerWorker": slots,
            "runPolicy": {"cleanPodPolicy": "Running"},
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": {"spec": {"containers": [
                    {"name": "launcher", "image": image, "command": launcher_args[:1], "args": launcher_args[1:]},
                ]}}},
                "Worker": {"replicas": len(p.hosts), "template": {"spec": {"containers": [
                    {"name": "worker", "image": image, "resources": {"limits": limits}},
                ]}}},
            },
        },
    }
    header = [
        f"# hvdkeras: {p.np} processes = {len(p.hosts)} worker pod(s) x {slots} (slotsPerWorker);"
        " generated by python -m hvdkeras.train --dry_run.",
        f"# The image ({image}) must have hvdkeras installed (pip) with python on PATH, Horovod built with",
        "# MPI (python -m hvdkeras.build_horovod; `horovodrun --check-build` lists MPI), the config file at its",
        "# working directory, and sshd for the workers, as in the MPI Operator's Horovod example.",
        "# A --workdir should be a volume shared by the pods.",
        "# kubectl apply -f <this file>",
    ]
    return "\n".join(header) + "\n" + yaml.safe_dump(manifest, sort_keys=False, default_flow_style=False)


def render_command(p: Plan, launcher: str = "horovodrun", image: str = DEFAULT_IMAGE) -> str:
    """The exact command (horovodrun, mpirun) or file text (slurm: sbatch script; kubernetes: MPIJob YAML)."""
    check_launcher(launcher)
    if launcher == "horovodrun":
        return horovodrun_command(p)
    if launcher == "mpirun":
        return mpirun_command(p)
    if launcher in ("slurm", "slurm-srun"):
        return slurm_script(p, srun=launcher == "slurm-srun")
    return kubernetes_manifest(p, image)


def launch_file(p: Plan, launcher: str = "horovodrun", image: str = DEFAULT_IMAGE) -> str:
    """What ``--dry_run_output`` writes: the command as a bash script, or the sbatch script / YAML itself."""
    text = render_command(p, launcher, image)
    if launcher in ("horovodrun", "mpirun"):
        return "#!/bin/bash\nset -euo pipefail\n" + text + "\n"
    return text


# --------------------------------------------------------------------------- the readable block


def _schedule(p: Plan) -> str:
    s = p.config.schedule
    if s.name == "step":
        at = ", ".join(f"{b:g}" for b in s.boundaries)
        text = f"step: x{s.decay_rate:g} at epochs {at}"
        if p.steps_per_epoch:
            text += " (steps " + ", ".join(str(math.ceil(b * p.steps_per_epoch)) for b in s.boundaries) + ")"
        return text
    if s.name in ("cosine", "polynomial"):
        extra = f", power {s.power:g}" if s.name == "polynomial" else ""
        return f"{s.name} to {s.end_lr_fraction:g} x scaled lr at epoch {p.epochs}{extra}"
    return "constant"


def describe(p: Plan, launcher: str = "horovodrun") -> str:
    """The plain-text summary ``--dry_run`` prints before the command."""
    cfg = p.config
    device = f"{p.gpus_per_host} GPU(s) per host, one per process" if p.gpus_per_host else "CPU hosts"
    rows = [
        ("world size", f"{p.np} process(es) on {len(p.hosts)} host(s): {hosts_text(p.hosts)} ({device})"),
        ("batch", f"global {p.global_batch} = {p.np} ranks x {p.per_rank_batch} per rank"
                  + (" (data.global_batch_size: the same on any number of ranks)" if cfg.data.global_batch_size
                     else " (data.per_rank_batch_size: grows with the ranks)")
                  + f"; eval: global {p.eval_global_batch} = {p.np} x {p.eval_per_rank_batch}"),
        ("learning rate", f"{scaling.formula(cfg.optimizer, cfg.data, p.np)}"
                          f" (optimizer.lr_scaling: {cfg.optimizer.lr_scaling}); {cfg.optimizer.name}"),
    ]
    if p.warmup_epochs > 0:
        steps = f"{p.warmup_steps} steps" if p.warmup_steps is not None else "unknown steps"
        rows.append(("warmup", f"{p.warmup_epochs:g} epoch(s) = {steps}, per batch from {p.warmup_start_lr:g}"
                               f" to {p.scaled_lr:g}"))
    else:
        rows.append(("warmup", "none"))
    rows.append(("schedule", _schedule(p)))
    auto_steps = "" if cfg.trainer.steps_per_epoch else "(auto) "
    rows.append(("steps per epoch", f"{p.steps_per_epoch} {auto_steps}({p.steps_note})" if p.steps_per_epoch
                 else p.steps_note))
    rows.append(("total steps", f"{p.total_steps} = {p.epochs} epochs x {p.steps_per_epoch}"
                 if p.total_steps is not None else f"unknown ({p.epochs} epochs x unknown steps per epoch)"))
    if cfg.horovod.backward_passes_per_step > 1:
        rows.append(("", f"the optimizer updates every {cfg.horovod.backward_passes_per_step} steps"
                         " (horovod.backward_passes_per_step)"))
    first_budget = p.threads[0][1]
    why = horovod_env.auto_reasons(cfg.horovod, cfg.runtime, p.horovod, first_budget, multi_host=len(p.hosts) > 1,
                                   cores=p.cores_per_host, ranks_on_host=p.threads[0][0])
    knobs = [f"{k}={'null' if v is None else v}{' (auto)' if f'horovod.{k}' in why else ''}"
             for k, v in dataclasses.asdict(p.horovod).items()]
    lines = [""]
    for knob in knobs:  # whole knobs per line
        if lines[-1] and len(lines[-1]) + len(knob) > 98:
            lines.append("")
        lines[-1] += (", " if lines[-1] else "") + knob
    rows.append(("horovod", ",\n".join(lines)))
    if "horovod.compression" in why:
        rows.append(("", f"compression (auto): {why['horovod.compression']}"))
    advice = horovod_env.compression_advice(p.horovod.compression, multi_host=len(p.hosts) > 1)
    if advice:
        rows.append(("note", advice))
    rows.append(("horovod env", " ".join(f"{k}={v}" for k, v in p.horovod_env.items())
                 + " (set on every rank before hvd.init; a variable already set wins)"))
    applied = " (not applied on GPU hosts)" if p.gpus_per_host else ""
    for n, budget in p.threads:
        auto = " (auto)" if cfg.runtime.intra_op_threads is None or cfg.runtime.inter_op_threads is None else ""
        rows.append(("threads per rank", f"intra-op {budget.intra_op}, inter-op {budget.inter_op}{auto}"
                                         f" ({p.cores_per_host} cores per host, {n} rank(s) per host){applied}"))
    if cfg.elastic.enabled:
        rows.append(("elastic", f"min_np {cfg.elastic.min_np}, max_np {cfg.elastic.max_np or 'unbounded'},"
                                f" on_resize {cfg.elastic.on_resize}"))
    rows.append(("launcher", _launcher_note(p, launcher)))
    width = max(len(k) for k, _ in rows) + 2
    return "\n".join(f"{k:<{width}}" + v.replace("\n", "\n" + " " * width) for k, v in rows)


def _launcher_note(p: Plan, launcher: str) -> str:
    if launcher == "horovodrun":
        if p.config.elastic.enabled:
            return "horovodrun, elastic (docs/elastic.md)"
        return "horovodrun" + (" --gloo (CPU hosts, as in the README)" if _uses_gloo(p) else "")
    if launcher == "mpirun":
        return "mpirun (Open MPI, Horovod's recipe; needs Horovod built with MPI: horovodrun --check-build)"
    if launcher == "slurm":
        return "slurm: sbatch script running horovodrun on the allocated nodes"
    if launcher == "slurm-srun":
        return "slurm-srun: sbatch script whose ranks srun --mpi=pmix starts (needs Horovod built with MPI)"
    return "kubernetes: Kubeflow MPI Operator MPIJob (kubeflow.org/v2beta1)"


def dry_run(config_path: str, overrides: Sequence[str] = (), workdir: Optional[str] = None,
            default_workdir: Optional[str] = None, np: Optional[int] = None, hosts: Optional[str] = None,
            launcher: str = "horovodrun", image: str = DEFAULT_IMAGE, gpus_per_host: int = 0,
            cores_per_host: Optional[int] = None, output: Optional[str] = None) -> str:
    """What ``python -m hvdkeras.train --dry_run`` prints: the summary, then the command or file.

    ``workdir`` is the ``--workdir`` given (repeated in the command); ``default_workdir``
    the one the trainer would use without it. With ``output`` the launch file is also
    written there. Nothing else is written.
    """
    check_launcher(launcher)
    cfg = config_lib.load(config_path, overrides)
    train_args = ["--config", config_path]
    for text in overrides:
        train_args += ["--set", text]
    if workdir:
        train_args += ["--workdir", workdir]
    p = plan(cfg, np, hosts, gpus_per_host=gpus_per_host, cores_per_host=cores_per_host, train_args=train_args,
             workdir=workdir or default_workdir)
    command = render_command(p, launcher, image)
    header = f"hvdkeras dry run: {config_path} (nothing started: no hvd.init, no training, no files)"
    text = f"{header}\n{describe(p, launcher)}\n\n"
    kind = {"horovodrun": "command", "mpirun": "command", "slurm": "sbatch script", "slurm-srun": "sbatch script",
            "kubernetes": "MPIJob manifest"}[launcher]
    text += f"--- {kind} ---\n{command}" + ("" if command.endswith("\n") else "\n")
    if output:
        try:
            with open(output, "w") as f:
                f.write(launch_file(p, launcher, image))
            if launcher in ("horovodrun", "mpirun"):
                os.chmod(output, 0o755)
        except OSError as exc:
            raise LaunchError(f"cannot write --dry_run_output {output}: {exc.strerror or exc}") from None
        text += f"--- written to {output} ---\n"
    return text


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m hvdkeras.launch --mpirun-flags [--gpus]``: prints the mpirun flags (for the Makefile)."""
    parser = argparse.ArgumentParser(prog="python -m hvdkeras.launch")
    parser.add_argument("--mpirun-flags", action="store_true", required=True,
                        help="print the flags of Horovod's Open MPI recipe, shell-quoted")
    parser.add_argument("--gpus", action="store_true", help="GPU hosts: add NCCL's transport report")
    args = parser.parse_args(argv)
    print(" ".join(shlex.quote(flag) for flag in mpirun_flags(args.gpus)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
