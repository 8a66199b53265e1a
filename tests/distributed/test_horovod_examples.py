"""Horovod's published Keras and TensorFlow 2 examples, switched by their import line (``examples/horovod/``), and
hvdkeras' own ``examples/keras_fit.py``, on two real ranks.

Each script is Horovod's example with ``import hvdkeras.keras as hvd`` (or ``hvdkeras.tensorflow``), offline data and
Keras 3's own migration (see each file's docstring); the tests run them as a user
would, shortened by their own flags, and check what the script promises.

The examples under ``horovodrun`` share one job, and those under an elastic launch another
(``tests/harness/shared_job.py``: each script runs as ``__main__`` with its own arguments, one after the
other in the same two processes, Keras' session cleared between them): one TensorFlow import and one
Horovod start instead of one per example (about 8-10 s each). Each test reads its own example's lines.
"""
import os
import re

import pytest

from tests.harness.ranks import DISCOVER_HOSTS, HOROVODRUN, MPI_ENV, REPO
from tests.harness.shared_job import run_scripts
from tests.harness.stacks import once_here, once_per_make_test

EXAMPLES = os.path.join(REPO, "examples", "horovod")

# Horovod's TF2 examples run hvdkeras' tape (gradient_exchange/tape.py) and hvdkeras.elastic's state and run, the
# same code on both stacks: once per `make test`, on keras3 (keras2 runs the tape in tensorflow2_mnist.py and
# test_same_training.py, and the elastic run in the Keras elastic example).
TF2_SYNTHETIC_ONCE = ("Horovod's TF2 synthetic benchmark: hvdkeras' tape with fp16 compression, the same code on both "
                      "stacks (keras2 runs the tape in tensorflow2_mnist.py and test_same_training.py)", 0.5, "keras3")
TF2_ELASTIC_ONCE = ("Horovod's TF2 elastic example: hvdkeras.elastic's state and run, which the Keras elastic example "
                    "above runs on both stacks", 0.6, "keras3")


def _example(name):
    return os.path.join(EXAMPLES, name)


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
    """The examples under ``horovodrun -np 2``, in one job; their checkpoints in ``<name>`` folders."""
    base = tmp_path_factory.mktemp("examples")
    jobs = {
        # 3 epochs (the warmup's) of 10 steps a rank (20 before dividing by the ranks): test accuracy 0.86-0.88
        "tensorflow2_keras_mnist": [_example("tensorflow2_keras_mnist.py"), "--epochs", "3", "--steps-per-epoch",
                                    "20", "--checkpoint-dir", str(base / "tensorflow2_keras_mnist")],
        "keras_mnist_advanced": [_example("keras_mnist_advanced.py"), "--epochs", "2", "--steps-per-epoch", "8",
                                 "--batch-size", "64", "--checkpoint-dir", str(base / "keras_mnist_advanced")],
        "tensorflow2_keras_synthetic_benchmark": [
            _example("tensorflow2_keras_synthetic_benchmark.py"), "--no-cuda", "--model", "MobileNet", "--image-size",
            "32", "--batch-size", "8", "--num-iters", "2", "--num-batches-per-iter", "2", "--fp16-allreduce"],
        "tensorflow2_mnist": [_example("tensorflow2_mnist.py"), "--steps", "24", "--checkpoint-dir",
                              str(base / "tensorflow2_mnist")],
        "keras_fit": [os.path.join(REPO, "examples", "keras_fit.py"), "--epochs", "3",
                      "--backup", str(base / "keras_fit" / "backup")],
    }
    if once_here(TF2_SYNTHETIC_ONCE[2]):
        jobs["tensorflow2_synthetic_benchmark"] = [
            _example("tensorflow2_synthetic_benchmark.py"), "--no-cuda", "--model", "MobileNet", "--image-size", "32",
            "--batch-size", "8", "--num-warmup-batches", "1", "--num-iters", "2", "--num-batches-per-iter", "2",
            "--fp16-allreduce"]
    for name in jobs:
        os.makedirs(base / name)
    return run_scripts(jobs), base


@pytest.fixture(scope="module")
def elastic_examples(tmp_path_factory):
    """The elastic examples under one elastic launch (one host with two slots); checkpoints in ``<name>`` folders."""
    base = tmp_path_factory.mktemp("elastic_examples")
    hosts = base / "hosts"
    hosts.write_text("localhost:2\n")
    jobs = {"tensorflow2_keras_mnist_elastic": [_example("tensorflow2_keras_mnist_elastic.py"), "--epochs", "3",
                                                "--steps-per-epoch", "8", "--checkpoint-dir",
                                                str(base / "tensorflow2_keras_mnist_elastic")]}
    if once_here(TF2_ELASTIC_ONCE[2]):
        jobs["tensorflow2_mnist_elastic"] = [_example("tensorflow2_mnist_elastic.py"), "--steps", "24",
                                             "--checkpoint-dir", str(base / "tensorflow2_mnist_elastic" / "ckpt")]
    for name in jobs:
        os.makedirs(base / name)
    # One host: Horovod's elastic launcher waits for two hosts to compare their network
    # interfaces unless --network-interface names one.
    launcher = [HOROVODRUN, "-np", "2", "--min-np", "1", "--max-np", "2", "--gloo", "--network-interface", "lo",
                "--host-discovery-script", DISCOVER_HOSTS]
    return run_scripts(jobs, launcher, env=dict(os.environ, **MPI_ENV, HVDKERAS_HOSTS_FILE=str(hosts))), base


def test_tensorflow2_keras_mnist_trains_and_rank_0_alone_writes_the_checkpoints(examples):
    ran, base = examples
    rank0 = ran.text("tensorflow2_keras_mnist")
    accuracy = float(re.search(r"Test accuracy: ([0-9.]+)", rank0).group(1))
    assert accuracy >= 0.80, rank0[-3000:]  # it trained: a tenth by chance
    assert sorted(os.listdir(base / "tensorflow2_keras_mnist")) == [f"checkpoint-{e}.keras" for e in (1, 2, 3)]
    assert "finished" in rank0 and "warmup" in rank0  # the warmup callback's verbose=1 line, once
    assert not any("warmup" in line for line in ran.lines("tensorflow2_keras_mnist", rank=1))


def test_keras_mnist_advanced_trains_with_augmentation_and_reduce_lr_on_plateau(examples):
    ran, base = examples
    assert re.search(r"Test accuracy: [0-9.]+", ran.text("keras_mnist_advanced")), ran.job.output[-3000:]
    assert sorted(os.listdir(base / "keras_mnist_advanced")) == ["checkpoint-1.keras", "checkpoint-2.keras"]


def test_tensorflow2_keras_synthetic_benchmark_runs_with_fp16_allreduce(examples):
    ran, _ = examples
    assert "Total img/sec on 2 CPU(s)" in ran.text("tensorflow2_keras_synthetic_benchmark"), ran.job.output[-3000:]


def test_tensorflow2_keras_mnist_elastic_trains_under_an_elastic_launch(elastic_examples):
    ran, base = elastic_examples
    assert ran.job.returncode == 0, ran.job.output[-3000:]
    assert "Finished at epoch 3" in ran.text("tensorflow2_keras_mnist_elastic"), ran.job.output[-3000:]
    assert sorted(p for p in os.listdir(base / "tensorflow2_keras_mnist_elastic") if p.endswith(".keras")) == [
        f"checkpoint-{e}.keras" for e in (1, 2, 3)]


def test_tensorflow2_mnist_custom_loop_trains_with_the_same_weights_on_every_rank(examples):
    """Horovod's TensorFlow 2 loop (DistributedGradientTape, broadcast_variables): horovod#4290 on Keras 3."""
    ran, base = examples
    first, second = [re.search(r"weights checksum: ([0-9.]+)", ran.text("tensorflow2_mnist", rank)).group(1)
                     for rank in (0, 1)]
    assert first == second, ran.job.output[-3000:]
    losses = [float(x) for x in re.findall(r"Step #\d+\tLoss: ([0-9.]+)", ran.text("tensorflow2_mnist"))]
    assert len(losses) == 2 and losses[-1] < losses[0], losses
    assert any(p.startswith("ckpt") for p in os.listdir(base / "tensorflow2_mnist"))


def test_keras_fit_example_runs_with_the_callbacks_alone(examples):
    """hvdkeras' own example: a plain Keras script with the callbacks and the optimizer (eleven lines changed)."""
    ran, base = examples
    final = [line for line in ran.lines("keras_fit") if "final val_accuracy=" in line]
    assert len(final) == 1 and not [line for line in ran.lines("keras_fit", rank=1) if "final val_accuracy=" in line]
    assert float(final[0].split("=")[1]) >= 0.85
    assert not (base / "keras_fit" / "backup").exists()  # Keras' BackupAndRestore: removed after a finished fit


@once_per_make_test(*TF2_SYNTHETIC_ONCE[:2], stack=TF2_SYNTHETIC_ONCE[2])
def test_tensorflow2_synthetic_benchmark_runs_with_the_tape_and_fp16_allreduce(examples):
    ran, _ = examples
    assert "Total img/sec on 2 CPU(s)" in ran.text("tensorflow2_synthetic_benchmark"), ran.job.output[-3000:]


@once_per_make_test(*TF2_ELASTIC_ONCE[:2], stack=TF2_ELASTIC_ONCE[2])
def test_tensorflow2_mnist_elastic_custom_loop_trains_under_an_elastic_launch(elastic_examples):
    ran, _ = elastic_examples
    assert ran.job.returncode == 0, ran.job.output[-3000:]
    assert "Finished at batch 11" in ran.text("tensorflow2_mnist_elastic"), ran.job.output[-3000:]
