"""Horovod's published Keras and TensorFlow 2 examples, switched by their import line (``examples/horovod/``), on two
real ranks.

Each script is Horovod's example with ``import hvdkeras.keras as hvd`` (or ``hvdkeras.tensorflow``), offline data and
Keras 3's own migration (see each file's docstring); the tests run them as a user
would, shortened by their own flags, and check what the script promises.
"""
import os
import re
import sys

from tests.harness.ranks import DISCOVER_HOSTS, HOROVODRUN, MPI_ENV, REPO, horovodrun, launch
from tests.harness.stacks import once_per_make_test

EXAMPLES = os.path.join(REPO, "examples", "horovod")


def _example(name):
    return os.path.join(EXAMPLES, name)


def _rank0(job):
    return "\n".join(job.lines_of(0))


def test_tensorflow2_keras_mnist_trains_and_rank_0_alone_writes_the_checkpoints(tmp_path):
    job = horovodrun([_example("tensorflow2_keras_mnist.py"), "--epochs", "3", "--steps-per-epoch", "40",
                      "--checkpoint-dir", str(tmp_path)], timeout=300)
    accuracy = float(re.search(r"Test accuracy: ([0-9.]+)", _rank0(job)).group(1))
    assert accuracy >= 0.85, job.output[-3000:]
    assert sorted(os.listdir(tmp_path)) == [f"checkpoint-{e}.keras" for e in (1, 2, 3)]
    assert "finished" in _rank0(job) and "warmup" in _rank0(job)  # the warmup callback's verbose=1 line, once
    assert not any("warmup" in line for line in job.lines_of(1))


def test_keras_mnist_advanced_trains_with_augmentation_and_reduce_lr_on_plateau(tmp_path):
    job = horovodrun([_example("keras_mnist_advanced.py"), "--epochs", "2", "--steps-per-epoch", "8",
                      "--batch-size", "64", "--checkpoint-dir", str(tmp_path)], timeout=300)
    assert re.search(r"Test accuracy: [0-9.]+", _rank0(job)), job.output[-3000:]
    assert sorted(os.listdir(tmp_path)) == ["checkpoint-1.keras", "checkpoint-2.keras"]


def test_tensorflow2_keras_synthetic_benchmark_runs_with_fp16_allreduce():
    job = horovodrun([_example("tensorflow2_keras_synthetic_benchmark.py"), "--no-cuda", "--model", "MobileNet",
                      "--image-size", "32", "--batch-size", "8", "--num-iters", "2", "--num-batches-per-iter", "2",
                      "--fp16-allreduce"], timeout=300)
    assert "Total img/sec on 2 CPU(s)" in _rank0(job), job.output[-3000:]


def test_tensorflow2_keras_mnist_elastic_trains_under_an_elastic_launch(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost:2\n")
    # One host: Horovod's elastic launcher waits for two hosts to compare their network
    # interfaces unless --network-interface names one.
    cmd = [HOROVODRUN, "-np", "2", "--min-np", "1", "--max-np", "2", "--gloo", "--network-interface", "lo",
           "--host-discovery-script", DISCOVER_HOSTS,
           sys.executable, _example("tensorflow2_keras_mnist_elastic.py"), "--epochs", "3", "--steps-per-epoch", "8",
           "--checkpoint-dir", str(tmp_path)]
    job = launch(cmd, env=dict(os.environ, **MPI_ENV, HVDKERAS_HOSTS_FILE=str(hosts)), timeout=300)
    assert "Finished at epoch 3" in job.output, job.output[-3000:]
    assert sorted(p for p in os.listdir(tmp_path) if p.endswith(".keras")) == [
        f"checkpoint-{e}.keras" for e in (1, 2, 3)]


def _checksums(job):
    return [re.search(r"weights checksum: ([0-9.]+)", "\n".join(job.lines_of(r))).group(1) for r in (0, 1)]


def test_tensorflow2_mnist_custom_loop_trains_with_the_same_weights_on_every_rank(tmp_path):
    """Horovod's TensorFlow 2 loop (DistributedGradientTape, broadcast_variables): horovod#4290 on Keras 3."""
    job = horovodrun([_example("tensorflow2_mnist.py"), "--steps", "24", "--checkpoint-dir", str(tmp_path)],
                     timeout=300)
    first, second = _checksums(job)
    assert first == second, job.output[-3000:]
    losses = [float(x) for x in re.findall(r"Step #\d+\tLoss: ([0-9.]+)", _rank0(job))]
    assert len(losses) == 2 and losses[-1] < losses[0], losses
    assert any(p.startswith("ckpt") for p in os.listdir(tmp_path))


@once_per_make_test("Horovod's TF2 synthetic benchmark: hvdkeras' tape with fp16 compression, the same code on both "
                    "stacks (keras2 runs the tape in tensorflow2_mnist.py and test_same_training.py)", 0.5,
                    stack="keras3")
def test_tensorflow2_synthetic_benchmark_runs_with_the_tape_and_fp16_allreduce():
    job = horovodrun([_example("tensorflow2_synthetic_benchmark.py"), "--no-cuda", "--model", "MobileNet",
                      "--image-size", "32", "--batch-size", "8", "--num-warmup-batches", "1", "--num-iters", "2",
                      "--num-batches-per-iter", "2", "--fp16-allreduce"], timeout=300)
    assert "Total img/sec on 2 CPU(s)" in _rank0(job), job.output[-3000:]


@once_per_make_test("Horovod's TF2 elastic example: hvdkeras.elastic's state and run, which the Keras elastic example "
                    "above runs on both stacks", 0.6, stack="keras3")
def test_tensorflow2_mnist_elastic_custom_loop_trains_under_an_elastic_launch(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost:2\n")
    cmd = [HOROVODRUN, "-np", "2", "--min-np", "1", "--max-np", "2", "--gloo", "--network-interface", "lo",
           "--host-discovery-script", DISCOVER_HOSTS,
           sys.executable, _example("tensorflow2_mnist_elastic.py"), "--steps", "24",
           "--checkpoint-dir", str(tmp_path / "ckpt")]
    job = launch(cmd, env=dict(os.environ, **MPI_ENV, HVDKERAS_HOSTS_FILE=str(hosts)), timeout=300)
    assert "Finished at batch 11" in job.output, job.output[-3000:]
