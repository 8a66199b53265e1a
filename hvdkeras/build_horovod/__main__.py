"""python -m hvdkeras.build_horovod: patch, build, install and check Horovod 0.28.1 for this environment."""
from __future__ import annotations

import shutil
import sys
from typing import Sequence

from absl import flags

from hvdkeras.build_horovod import BuildError, builder, checks, patches
from hvdkeras.build_horovod import build_plan as plans
from hvdkeras.common import command_line
from hvdkeras.common.errors import shown

USAGE = """usage: python -m hvdkeras.build_horovod [flags]

Builds Horovod 0.28.1 from the registry's source, patched for current TensorFlow, against the TensorFlow installed
here; installs it and checks it on two ranks."""


def define_flags() -> flags.FlagValues:
    """``python -m hvdkeras.build_horovod``'s flags, on a set of their own (the spellings ``make install`` uses)."""
    values = command_line.flag_values()
    flags.DEFINE_boolean("gpu", False, "build the CUDA/NCCL allreduce (HOROVOD_GPU_OPERATIONS=NCCL; NCCL from the"
                         " nvidia-nccl-cu12 wheel when it is installed). Unverified: see docs/stacks.md, GPU builds.",
                         flag_values=values)
    flags.DEFINE_enum("mpi", "auto", ["auto", "yes", "no"], "build the MPI controller too: auto (when OpenMPI's mpicxx"
                      " and mpirun are on PATH), yes, no", flag_values=values)
    flags.DEFINE_string("cache-dir", None, "where built wheels are kept (default $HVDKERAS_WHEEL_CACHE or"
                        f" {builder.DEFAULT_CACHE})", flag_values=values)
    flags.DEFINE_boolean("rebuild", False, "build again even if the cache has this build's wheel", flag_values=values)
    flags.DEFINE_boolean("no-install", False, "only build the wheel (and print its folder)", flag_values=values)
    flags.DEFINE_boolean("no-smoke", False, "skip the two-rank check (--check-build still runs)", flag_values=values)
    flags.DEFINE_boolean("print-plan", False, "print the build id and flags and stop", flag_values=values)
    return values


FLAGS = define_flags()


def main(argv: Sequence[str] | None = None) -> int:
    """Builds, installs and checks Horovod as the command line asks (``argv`` without the program's name).

    Returns:
        The exit status: 0 on success. A ``BuildError`` ends the command as every command's errors do: one line,
        ``hvdkeras: error: <what failed and how to fix it>``, and exit status 2.
    """
    rest = command_line.parse(FLAGS, ["python -m hvdkeras.build_horovod", *(sys.argv[1:] if argv is None else argv)],
                              USAGE)
    if rest[1:]:
        command_line.fail(f"python -m hvdkeras.build_horovod takes flags only; received: {shown(rest[1])} (--help"
                          " lists them)")
    args = FLAGS
    try:
        plan = plans.discover(mpi=args.mpi, gpu=args.gpu)
        selected = patches.select(gpu=plan.gpu)
        if patches.open_rendezvous(selected):
            builder.log(f"WARNING: {patches.AUTH_PATCH} left out ({patches.OPEN_ENV}=1): this Horovod's Gloo"
                        " rendezvous answers anyone who reaches its port, and hvdkeras refuses it unless"
                        f" {patches.OPEN_ENV}=1 is set where it runs too")
        root = builder.cache_root(args['cache-dir'].value)
        if args['print-plan'].value:
            print(plans.build_id(plan, patches.digest(selected)))
            for key, value in sorted(plans.build_env(plan).items()):
                print(f"  {key}={value}")
            print("  patches: " + " ".join(p.name for p in selected))
            return 0
        if args.rebuild:
            shutil.rmtree(root / plans.build_id(plan, patches.digest(selected)), ignore_errors=True)
        folder = builder.build_wheel(plan, root, selected)
        if args['no-install'].value:
            print(folder)
            return 0
        builder.install(folder)
        builder.log("checking: horovodrun --check-build")
        print(checks.check_build(plan).rstrip())
        if not args['no-smoke'].value:
            builder.log("checking: allreduce (dense, int32, sparse), grouped_allreduce (eager, tf.function), "
                        "broadcast on two Gloo ranks")
            checks.smoke(plan)
        builder.log(f"done: Horovod {plans.HOROVOD_VERSION} for {plan.tf_distribution} {plan.tf_version} "
                    f"({plan.controllers}, {plan.devices}) passed its checks")
        return 0
    except BuildError as exc:
        command_line.fail(command_line.error_line(exc))


if __name__ == "__main__":
    sys.exit(main())
