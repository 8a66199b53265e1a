"""Slurm: an ``sbatch`` script, from the template files beside this module.

``slurm.sbatch`` is the script; with ``checkpoint.preemption`` its first command is
``slurm_signals.sh`` (the traps) and its last ``slurm_requeue.sh`` (the time limit's signal
becomes a checkpoint at one batch and a requeue), else its last line is an ``exec`` of the
launcher. Both are :class:`string.Template` text
(``$$`` is a shell ``$``), installed with the package.
"""
from __future__ import annotations

import math
import os
import shlex
import string
import sys

from hvdkeras.launch.commands import TRAIN_MODULE, job_name, need_uniform, no_elastic, shell, uses_gloo
from hvdkeras.launch.plan import Plan

HERE = os.path.dirname(os.path.abspath(__file__))
LAUNCHER_COMMENTS = {
    "srun": (
        "# Launcher: srun starts every rank on the allocated nodes; Horovod's MPI controller (PMIx) connects\n"
        "# them: needs Horovod built with MPI (`horovodrun --check-build`); --launcher slurm uses horovodrun."),
    "horovodrun": (
        "# Launcher: horovodrun, started once on the first node, starts the ranks on every allocated node over ssh\n"
        "# (Horovod's documented `horovodrun -np N -H host:slots` form; works with a Gloo-only Horovod build).\n"
        "# With Horovod built with MPI, --launcher slurm-srun writes the `srun --mpi=pmix` form."),
}


def _template(name: str) -> string.Template:
    with open(os.path.join(HERE, name)) as f:
        return string.Template(f.read())


def venv_activate() -> str:
    """The line that activates the venv this dry run runs in ('' outside a venv): relative to the
    current folder (where ``sbatch`` is run and the job starts) when it is inside it."""
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
    no_elastic(p, launcher)
    slots = need_uniform(p, launcher)
    activate = venv_activate()
    optional = []
    if p.gpus_per_host:
        optional.append(f"#SBATCH --gpus-per-node={p.gpus_per_host}")
    ckpt = p.config.checkpoint
    preemption = ckpt.enabled and ckpt.preemption
    if preemption:
        # SIGUSR1 to the batch shell (B:) ahead of the time limit: it passes a SIGTERM to horovodrun, which
        # forwards it to the ranks; they stop at one batch and checkpoint; the lead covers that and Slurm's
        # slack (its signal timer is checked about once a minute). Then the job requeues itself.
        lead = max(60, int(math.ceil(ckpt.preemption_grace_s)) + 30)
        optional += [f"#SBATCH --signal=B:USR1@{lead}", "#SBATCH --requeue", "#SBATCH --open-mode=append"]
    if srun:
        command, hosts_line = ["srun", "--mpi=pmix", "python"] + list(TRAIN_MODULE)[1:], ""
    else:
        hosts_line = (f'HOSTS=$(scontrol show hostnames "${{SLURM_JOB_NODELIST}}" | sed "s/$/:{slots}/"'
                      ' | paste -sd, -)\n')
        command = (["horovodrun", "-np", str(p.np), "-H", '"${HOSTS}"'] + (["--gloo"] if uses_gloo(p) else [])
                   + list(TRAIN_MODULE))
    signals = ""
    if preemption:
        signals = _template("slurm_signals.sh").substitute(runner=command[0])
        run = _template("slurm_requeue.sh").substitute(runner=command[0], command=shell(command, p.train_args))
    else:
        run = shell(["exec"] + command, p.train_args)
    return _template("slurm.sbatch").substitute(
        name=job_name(p), nodes=len(p.hosts), slots=slots, cpus=dict(p.threads)[slots].intra_op, np=p.np,
        optional_sbatch="".join(line + "\n" for line in optional),
        launcher_comment=LAUNCHER_COMMENTS["srun" if srun else "horovodrun"],
        nodelist_hint=(f" (add #SBATCH --nodelist={','.join(h.name for h in p.hosts)} to pin the --hosts names)."
                       if p.hosts[0].name != "localhost" else "."),
        environment=(activate + "  # the same venv path on every node (README)" if activate
                     else "# python and horovodrun from PATH, the same on every node"),
        signals=signals, hosts_line=hosts_line, run=run.rstrip("\n"))
