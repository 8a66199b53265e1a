"""hvdkeras.spark.common.gpus: a rank uses the GPU Spark assigned its task, its local rank's, or none."""
from hvdkeras.spark.common import gpus


def test_a_rank_whose_task_was_assigned_a_gpu_sees_only_that_one_and_pins_it():
    environ = {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    assert gpus.choose(True, ["2"], environ) == 0
    assert environ["CUDA_VISIBLE_DEVICES"] == "2"
    assert gpus.choose(True, ["3", "1"], environ) == 0 and environ["CUDA_VISIBLE_DEVICES"] == "3"


def test_without_gpu_scheduling_a_rank_pins_its_local_ranks_gpu():
    environ = {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert gpus.choose(True, [], environ) is None
    assert environ == {"CUDA_VISIBLE_DEVICES": "0,1"}  # untouched: the local rank picks among these


def test_use_gpu_false_hides_every_gpu_even_an_assigned_one():
    environ = {}
    assert gpus.choose(False, ["1"], environ) is None
    assert environ == {"CUDA_VISIBLE_DEVICES": "-1"}


def test_outside_a_spark_task_nothing_is_assigned():
    assert gpus.assigned() == []
