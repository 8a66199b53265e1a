"""hvdkeras.build_horovod.checks: what a failed check-build or smoke check prints."""
from hvdkeras.build_horovod import checks
from tests.unit.helpers import cpu_build_plan

CPU = cpu_build_plan()

CHECK_BUILD = """Horovod v0.28.1:

Available Frameworks:
    [X] TensorFlow
    [ ] PyTorch

Available Controllers:
    [ ] MPI
    [X] Gloo

Available Tensor Operations:
    [ ] NCCL
    [ ] MPI
    [X] Gloo
"""


def test_check_build_output_lists_what_is_missing():
    assert checks.missing_from_check_build(CHECK_BUILD, ["TensorFlow", "Gloo"]) == []
    assert checks.missing_from_check_build(CHECK_BUILD, ["TensorFlow", "Gloo", "MPI", "NCCL"]) == ["MPI", "NCCL"]


def test_required_frameworks_follow_the_plan():
    import dataclasses

    assert checks.required_frameworks(CPU) == ["TensorFlow", "Gloo"]
    assert checks.required_frameworks(dataclasses.replace(CPU, mpi=True, gpu=True)) == ["TensorFlow", "Gloo", "MPI",
                                                                                        "NCCL"]


OK = "\n".join(f"[{r}]<stdout>:SMOKE ok {op}" for r in (0, 1) for op in ("allreduce", "broadcast"))


def test_smoke_passes_only_when_every_rank_reached_the_last_op():
    assert checks.smoke_failure(OK, 0) is None
    assert checks.smoke_failure(OK, 1).startswith("the ranks exited 1")


def test_smoke_failure_names_the_op_and_the_values():
    out = OK + "\n[1]<stdout>:SMOKE FAILED grouped_allreduce: got [[3.,6.,12.]], expected [[3.,6.,13.]] (rank 1 of 2)"
    assert checks.smoke_failure(out, 1) == ("grouped_allreduce: got [[3.,6.,12.]], expected [[3.,6.,13.]] "
                                            "(rank 1 of 2)")


def test_smoke_crash_reports_the_error_line():
    out = ("[0]<stderr>:Traceback (most recent call last):\n[0]<stderr>:  File x\n"
           "[0]<stderr>:tensorflow.python.framework.errors_impl.NotFoundError: undefined symbol: _ZN3xla\n")
    assert checks.smoke_failure(out, 1) == ("the ranks exited 1 before finishing: [0]<stderr>:tensorflow.python."
                                            "framework.errors_impl.NotFoundError: undefined symbol: _ZN3xla")
