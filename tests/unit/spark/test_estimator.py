"""hvdkeras.spark.keras.estimator's parameters: refused in one line before a fit writes anything (no Spark needed)."""
import pytest

pytest.importorskip("pyspark")

from hvdkeras.common.errors import ConfigError, SetupError  # noqa: E402
from hvdkeras.spark.keras.estimator import KerasEstimator  # noqa: E402


@pytest.mark.parametrize("retries", [-1, 1.5, "2", True])
def test_a_bad_max_retries_is_one_line(retries):
    with pytest.raises(SetupError) as error:
        KerasEstimator(max_retries=retries)._max_retries()
    assert str(error.value) == f"max_retries must be a whole number of at least 0 (Received: max_retries={retries!r})"


def test_max_retries_defaults_to_two_and_zero_means_none():
    assert KerasEstimator()._max_retries() == 2
    assert KerasEstimator(max_retries=0)._max_retries() == 0


def test_a_run_id_is_a_name_and_the_default_one_is_new_each_fit():
    with pytest.raises(ConfigError, match=r"not a path \(Received: run_id='\.\./\.\./x'\)"):
        KerasEstimator(run_id="../../x")._run_id()
    est = KerasEstimator()
    assert est._run_id() != est._run_id()
    assert KerasEstimator(run_id="mnist")._run_id() == "mnist"


def test_petastorm_only_parameters_are_accepted_with_their_getters_and_setters():
    est = KerasEstimator(mp_start_method="spawn", reader_pool_type="process", train_reader_num_workers=4)
    assert est.getMpStartMethod() == "spawn" and est.getReaderPoolType() == "process"
    assert est.setMpStartMethod("forkserver").getMpStartMethod() == "forkserver"
    assert est.getTrainReaderNumWorkers() == 4 and est.getValReaderNumWorkers() == 2  # Horovod's default


def test_what_would_change_training_without_effect_is_refused():
    with pytest.raises(SetupError, match=r"^KerasEstimator\(data_module=\.\.\.\) has no meaning here"):
        KerasEstimator(data_module=object())
