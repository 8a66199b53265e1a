"""hvdkeras.tf_estimator on two real ranks, through the API, the config path and the example (the API's Estimators and
the example in one job)."""
import os

import pytest

from hvdkeras.runtime import compat
from tests.harness.ranks import REPO, SCRIPTS, horovodrun, rank_results, read_jsonl, results
from tests.harness.shared_job import run_scripts

SCRIPT = os.path.join(SCRIPTS, "estimator_check.py")
# The keras3 stack refuses the Estimator path in one line (tests/unit/test_estimator.py checks it).
pytestmark = pytest.mark.skipif(bool(compat.estimator_unavailable()), reason=compat.estimator_unavailable())


@pytest.fixture(scope="module")
def first_runs(tmp_path_factory):
    """One job (one start of two ranks for three Estimators, ``tests/harness/shared_job.py``): the classic
    ``model_fn`` Estimator and the compiled Keras model as an Estimator (``scripts/estimator_check.py``), 40
    single-process steps each, then ``examples/estimator_mnist.py`` as a user runs it. ``({kind: (results by rank,
    model_dir)}, the ScriptsJob)``, each ``model_dir`` alone in a folder of its own."""
    base = tmp_path_factory.mktemp("estimator")
    dirs = {kind: base / kind / "model" for kind in ("model_fn", "keras")}
    shared = run_scripts({"estimator_check": [SCRIPT, f"{dirs['model_fn']}:40", f"{dirs['keras']}:40:keras"],
                          "estimator_mnist": [os.path.join(REPO, "examples", "estimator_mnist.py"), "--model_dir",
                                              str(base / "example" / "m"), "--steps", "40", "--mock_examples", "200"]},
                         timeout=400)
    found = results(shared.job_of("estimator_check"))
    return {kind: ({r["rank"]: r for r in found if r["run"] == index}, dirs[kind])
            for index, kind in enumerate(dirs)}, shared


def test_estimator_trains_identically_writes_once_and_resumes(first_runs):
    res, model_dir = first_runs[0]["model_fn"]
    for r in (0, 1):
        assert res[r]["global_step"] == 20  # 40 single-process steps over 2 ranks
        assert res[r]["lr"] == pytest.approx(0.1)  # 0.05 scaled by 2 ranks
        # uneven evaluation shards (7 + 5): every example counted once
        assert res[r]["accuracy"] == pytest.approx(res[r]["expected_accuracy"], abs=1e-6)
    assert res[0]["weights"] == res[1]["weights"]
    assert res[0]["accuracy"] == res[1]["accuracy"]
    # only rank 0's model_dir holds checkpoints and event files; rank 1 wrote into a temporary folder, now gone
    assert os.path.abspath(res[0]["own_model_dir"]) == str(model_dir)
    assert not res[1]["own_model_dir"].startswith(str(model_dir.parent.parent))
    assert not os.path.exists(res[1]["own_model_dir"])
    assert sorted(os.listdir(model_dir.parent)) == ["model"]
    files = os.listdir(model_dir)
    assert "model.ckpt-20.index" in files and any(f.startswith("events.out.tfevents") for f in files)

    res = rank_results(horovodrun([SCRIPT, str(model_dir), "60"], timeout=300))  # restart, same model_dir
    for r in (0, 1):
        assert res[r]["first_step"] == 20  # continued from rank 0's checkpoint, on both ranks
        assert res[r]["global_step"] == 30
    assert res[0]["weights"] == res[1]["weights"]


def test_compiled_keras_model_as_estimator(first_runs):
    res, model_dir = first_runs[0]["keras"]
    for r in (0, 1):
        assert res[r]["global_step"] == 20
        assert res[r]["accuracy"] == pytest.approx(res[r]["expected_accuracy"], abs=1e-6)
    assert res[0]["weights"] == res[1]["weights"]
    assert sorted(os.listdir(model_dir.parent)) == ["model"]


def test_estimator_config_path_on_digits(tmp_path):
    job = horovodrun(["-m", "hvdkeras.train", "--config", os.path.join(REPO, "configs", "estimator_digits.yaml"),
                      "--workdir", str(tmp_path / "w"), "--set", "trainer.epochs=2"], timeout=400)
    final = [line for line in job.output.splitlines() if "final validation" in line]
    assert len(final) == 1 and final[0].startswith("[0]<stdout>:")
    records = read_jsonl(tmp_path / "w" / "metrics.jsonl")
    assert [r["epoch"] for r in records] == [1, 2]
    assert records[-1]["global_step"] == 2 * 22 and records[-1]["accuracy"] > 0.8
    assert sorted(os.listdir(tmp_path / "w")) == ["config.yaml", "estimator", "metrics.jsonl"]


def test_estimator_mnist_example(first_runs):
    shared = first_runs[1]
    lines = [line for line in shared.lines("estimator_mnist") if "global_step=" in line]
    assert len(lines) == 1 and "global_step=20" in lines[0]  # printed once, by rank 0
    assert not [line for line in shared.lines("estimator_mnist", rank=1) if "global_step=" in line]
