"""The readable block ``--dry_run`` prints before the command: batches, rate, steps, Horovod, threads."""
from __future__ import annotations

import dataclasses
import math
from typing import Optional

from hvdkeras.common import horovod_env, scaling
from hvdkeras.launch.commands import job_name, uses_gloo
from hvdkeras.launch.kubernetes import KubernetesOptions, needs
from hvdkeras.launch.kubernetes_pods import claim_name, no_volume_note
from hvdkeras.launch.plan import Plan, hosts_text


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


def describe(p: Plan, launcher: str = "horovodrun", kubernetes: Optional[KubernetesOptions] = None) -> str:
    """The plain-text summary ``--dry_run`` prints before the command (``kubernetes``: the Kubernetes options)."""
    cfg = p.config
    device = f"{p.gpus_per_host} GPU(s) per host, one per process" if p.gpus_per_host else "CPU hosts"
    rows = [
        ("world size", f"{p.np} process(es) on {len(p.hosts)} host(s): {hosts_text(p.hosts)} ({device})"),
        ("batch", f"global {p.global_batch} = {p.np} ranks x {p.per_rank_batch} per rank"
                  + (" (data.global_batch_size: the same on any number of ranks)" if cfg.data.global_batch_size
                     else " (data.per_rank_batch_size: grows with the ranks)")
                  + f"; eval: global {p.eval_global_batch} = {p.np} x {p.eval_per_rank_batch}"),
        ("learning rate", f"{scaling.formula(cfg.optimizer, cfg.data, p.np)}"
                          + (f" (optimizer.lr_scaling: {cfg.optimizer.lr_scaling})"
                             if cfg.optimizer.lr_scaling != "none" else "")  # the formula names none itself
                          + f"; {cfg.optimizer.name}"),
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
    rows.append(("cpu binding", cpu_binding_note(cfg.runtime.cpu_binding, p)))
    if cfg.elastic.enabled:
        rows.append(("elastic", f"min_np {cfg.elastic.min_np}, max_np {cfg.elastic.max_np or 'unbounded'},"
                                f" on_resize {cfg.elastic.on_resize}"))
    rows.append(("launcher", launcher_note(p, launcher, kubernetes)))
    if launcher == "kubernetes":
        options = kubernetes or KubernetesOptions()
        claim = claim_name(job_name(p), options)
        rows.append(("workdir volume", f"PersistentVolumeClaim {claim} (ReadWriteMany), mounted in every pod"
                     + (", rendered with the job" if claim and not options.pvc else "") if claim
                     else f"warning: {no_volume_note(options)}"))
    width = max(len(k) for k, _ in rows) + 2
    return "\n".join(f"{k:<{width}}" + v.replace("\n", "\n" + " " * width) for k, v in rows)


def cpu_binding_note(setting: str, p: Plan) -> str:
    """What ``runtime.cpu_binding`` will do on the plan's hosts (:func:`hvdkeras.common.horovod_env.cpu_binding`)."""
    if p.gpus_per_host:
        return "none: GPU hosts pin each rank to its GPU instead"
    if setting == "none":
        return "none (runtime.cpu_binding): the ranks' threads may run on any of the host's cores"
    cores, parts = p.cores_per_host, []
    shared = tuple(range(cores))
    for n in sorted({n for n, _ in p.threads}):
        blocks = [len(horovod_env.cpu_binding("auto", shared, shared, r, n).cpus) for r in range(n)]
        if n == 1:
            parts.append("one rank per host: nothing to bind")
        elif not all(blocks):
            parts.append(f"{n} ranks on {cores} cores per host: left unbound")
        else:
            low, high = min(blocks), max(blocks)
            parts.append(f"{n} ranks per host: each on its own block of {low}{f'-{high}' if high > low else ''}"
                         f" of the {cores} cores")
    return "; ".join(parts) + " (auto; a binding by the launcher is kept)"


def launcher_note(p: Plan, launcher: str, kubernetes: Optional[KubernetesOptions] = None) -> str:
    """One line naming the launcher and what it needs (MPI, elastic, Gloo; a cluster's operator)."""
    if launcher == "horovodrun":
        if p.config.elastic.enabled:
            return "horovodrun, elastic (docs/elastic.md)"
        return "horovodrun" + (" --gloo (CPU hosts, as in the README)" if uses_gloo(p) else "")
    if launcher == "mpirun":
        return "mpirun (Open MPI, Horovod's recipe; needs Horovod built with MPI: horovodrun --check-build)"
    if launcher == "slurm":
        return "slurm: sbatch script running horovodrun on the allocated nodes"
    if launcher == "slurm-srun":
        return "slurm-srun: sbatch script whose ranks srun --mpi=pmix starts (needs Horovod built with MPI)"
    if launcher == "ray":
        return ("ray: one Ray actor per rank on a running Ray cluster, Gloo's rendezvous on the driver (run it on a"
                " node of the cluster; docs/ray.md)")
    options = kubernetes or KubernetesOptions()
    if options.api == "mpijob":
        return f"kubernetes: the MPI Operator's MPIJob (kubeflow.org/v2beta1); the cluster needs {needs(options)}"
    return (f"kubernetes: Kubeflow Trainer's TrainJob (trainer.kubeflow.org/v1alpha1) and the MPI"
            f" ClusterTrainingRuntime it refers to; the cluster needs {needs(options)}")
