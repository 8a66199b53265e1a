"""Datasets through TensorFlow Datasets on two real ranks: sharding, validation, every config's loader."""
import json
import os

import numpy as np
import pytest

from tests.harness.ranks import REPO, SCRIPTS, horovodrun, read_jsonl, results
from tests.harness.stacks import once_here, once_per_make_test

DATA_CHECK = os.path.join(SCRIPTS, "data_check.py")

# Every config's loader and model on mock data: once per `make test`, on keras2, whose lane ends first
# (docs/records/test-timings.md). The loaders are tf.data and hvdkeras.training.data, the same code on both
# stacks; the zoo's models are built on both stacks (tests/unit/training/test_models.py: ResNet-50's 25,557,032
# parameters among them), and a model's training step on two ranks is every distributed test's. resnet.yaml's
# ImageNet pipeline runs at 224 px on resnet20: ResNet-50's own two-rank job cost about 40 s of tracing on keras2
# and took no path the others do not.
MOCK_ONCE = ("every config's loader on mock data (tf.data, the same code on both stacks)", 0.5, "keras2")

MOCK_JOBS = {
    # no checkpoint: ResNet-50's 200 MB save costs 9 s of this job's 54 (the rest is tracing its train and
    # eval steps); checkpoints are the small models' tests' subject
    "resnet.yaml": (["data.global_batch_size=4", "data.eval_global_batch_size=4", "data.shuffle_buffer=16",
                     "checkpoint.enabled=false", "model.name=resnet20"], [224, 224, 3]),
    "cifar10_resnet56.yaml": (["data.global_batch_size=8", "model.name=resnet20"], [32, 32, 3]),
    "mnist.yaml": (["data.per_rank_batch_size=4"], [28, 28, 1]),  # Horovod's convention, as the config
    # resnet20 is trained just before: here the synthetic loader,
    # on the smallest CNN (resnet20 cost 6 s of this job's start on 2 cores, the CNN under 2)
    "synthetic_resnet50.yaml": (["data.global_batch_size=4", "data.image_shape=[64,64,3]", "model.name=small_cnn"],
                                [64, 64, 3]),
}


UNEVEN = ["data.name=hvdkeras_tiny", "data.eval_split=test", "data.per_rank_batch_size=4",
          "data.eval_global_batch_size=4", "model.name=mlp", "trainer.epochs=2", "trainer.verbose=0",
          "trainer.export=false", "schedule.warmup_epochs=0"]


@pytest.fixture(scope="module")
def data_job(tmp_path_factory):
    """One job (``scripts/data_check.py``) for the whole file, one TensorFlow import and one Horovod start instead of
    four starts: rank 0 prepares hvdkeras_tiny (52 train, 17 test examples) for real, offline; both ranks read it
    (``shard``); the mnist config trains on it with uneven validation shards (``uneven``); then every config of
    MOCK_JOBS trains for two steps on mock data, one after the other. Returns ``(results by part, base folder)``:
    ``{"shard": {rank: result}, "uneven": {rank: result}, "mock": {config: ({rank: result}, workdir)}}``."""
    base = tmp_path_factory.mktemp("data")
    data_dir = base / "tfds"
    plan = {"tiny": str(data_dir),
            "uneven": [os.path.join(REPO, "configs", "mnist.yaml"), str(base / "uneven"),
                       [*UNEVEN, f"data.data_dir={data_dir}"]],
            "mock": [[os.path.join(REPO, "configs", config), str(base / config), [
                "trainer.epochs=1", "trainer.steps_per_epoch=2", "trainer.verbose=0", "trainer.export=false",
                *overrides]] for config, (overrides, _) in MOCK_JOBS.items()]}
    if not once_here(MOCK_ONCE[2]):
        del plan["mock"]
    found = results(horovodrun([DATA_CHECK, json.dumps(plan)], timeout=600))
    by_part = {part: {r["rank"]: r for r in found if r["part"] == part} for part in ("shard", "uneven")}
    by_part["mock"] = {config: ({r["rank"]: r for r in found if r["part"] == "mock" and r["job"] == index},
                                base / config) for index, config in enumerate(MOCK_JOBS)}
    return by_part, base


def test_each_example_is_read_once_per_epoch_across_ranks(data_job):
    res = data_job[0]["shard"]
    for epoch in range(2):
        ids = res[0]["epochs"][epoch] + res[1]["epochs"][epoch]
        assert sorted(ids) == list(range(52))  # exactly the dataset, each once
        assert not set(res[0]["epochs"][epoch]) & set(res[1]["epochs"][epoch])
    for r in (0, 1):
        assert res[r]["epochs"][0] != res[r]["epochs"][1]  # reshuffled every epoch
        assert res[r]["resumed_epoch_1"] == res[r]["epochs"][1]  # reproducible from the seed (and on resume)
        assert sorted(res[r]["epochs"][0]) == sorted(res[r]["epochs"][1])  # a rank keeps its shard
    assert sorted(res[0]["val"] + res[1]["val"]) == list(range(1000, 1017))  # uneven 9 + 8, all of them
    assert {len(res[0]["val"]), len(res[1]["val"])} == {9, 8}


def test_uneven_validation_shards_match_one_process(data_job):
    by_part, base = data_job
    single = by_part["uneven"][0]["single_process_eval"]
    last = read_jsonl(base / "uneven" / "metrics.jsonl")[-1]
    assert last["val_loss"] == pytest.approx(single["loss"], abs=1e-5)
    assert last["val_accuracy"] == pytest.approx(single["accuracy"], abs=1e-5)
    assert by_part["uneven"][0]["final"] == by_part["uneven"][1]["final"]  # every rank returns the global metrics


@once_per_make_test(*MOCK_ONCE[:2], stack=MOCK_ONCE[2])
@pytest.mark.parametrize("config", list(MOCK_JOBS))
def test_every_config_trains_a_few_steps_on_mock_data(config, data_job):
    res, workdir = data_job[0]["mock"][config]
    input_shape = MOCK_JOBS[config][1]
    assert res[0]["input_shape"] == res[1]["input_shape"] == input_shape
    assert res[0]["final"] == res[1]["final"]
    assert np.isfinite(res[0]["final"]["loss"])
    assert np.isfinite(res[0]["mean"]) and res[0]["std"] > 0
    records = read_jsonl(workdir / "metrics.jsonl")
    assert len(records) == 1 and records[0]["images_per_sec"] > 0 and records[0]["images_per_sec_per_rank"] > 0


def test_missing_imagenet_says_which_files_go_where(tmp_path):
    job = horovodrun(["-m", "hvdkeras.train", "--config", os.path.join(REPO, "configs", "resnet.yaml"),
                      "--workdir", str(tmp_path / "w"), "--set", f"data.data_dir={tmp_path / 'tfds'}"],
                     timeout=180, check=False)
    assert job.returncode != 0
    errors = [line for line in job.output.splitlines() if "hvdkeras: error:" in line]
    assert errors, job.output[-3000:]
    msg = errors[0]
    assert "imagenet2012 is not prepared" in msg and "ILSVRC2012_img_train.tar and ILSVRC2012_img_val.tar" in msg
    assert f"{tmp_path / 'tfds'}/downloads/manual" in msg and "tfds build imagenet2012" in msg
    assert "Traceback" not in job.output.split("Process 0 exit")[0]
