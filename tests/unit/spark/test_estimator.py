"""hvdkeras.spark.keras.estimator's parameters: refused in one line before a fit writes anything (no Spark needed)."""
import pytest

pytest.importorskip("pyspark")

from hvdkeras.common.errors import ConfigError, SetupError  # noqa: E402
from hvdkeras.spark.common.backend import SparkBackend  # noqa: E402
from hvdkeras.spark.keras import fit_settings  # noqa: E402
from hvdkeras.spark.keras.estimator import KerasEstimator  # noqa: E402


@pytest.mark.parametrize("retries", [-1, 1.5, "2", True])
def test_a_bad_max_retries_is_one_line(retries):
    with pytest.raises(SetupError) as error:
        fit_settings.max_retries(KerasEstimator(max_retries=retries).getOrDefault)
    assert str(error.value) == f"max_retries must be a whole number of at least 0 (Received: max_retries={retries!r})"


def test_max_retries_defaults_to_two_and_zero_means_none():
    assert fit_settings.max_retries(KerasEstimator().getOrDefault) == 2
    assert fit_settings.max_retries(KerasEstimator(max_retries=0).getOrDefault) == 0


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


class _Backend:
    """A backend whose run_retrying raises ``error``, as the runner would (no Spark), or returns ``results``."""

    def __init__(self, error, results=None):
        self.error, self.results = error, results

    def num_processes(self):
        return 2

    def run_retrying(self, fn, args=(), env=None, max_retries=0, retry_hint=""):
        if self.error is not None:
            raise self.error
        return self.results


def _train(tmp_path, error, results=None):
    import types

    from hvdkeras.runtime.compat import keras
    from hvdkeras.spark.common.store import Store

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    column = types.SimpleNamespace(size=3, shape=(3,))
    prepared = types.SimpleNamespace(feature_cols=("x",), label_cols=("y",),
                                     columns={"x": column, "y": types.SimpleNamespace(size=1, shape=())})
    from hvdkeras.spark.keras import fit_settings

    est = KerasEstimator(model=model, loss="mse", max_retries=1)
    optimizer = keras.optimizers.SGD(0.1)
    from hvdkeras.spark.common.runs import StoredRun

    run = StoredRun(Store.create(str(tmp_path / "store")), "r1")
    return est._train(model, optimizer, "mse", run, _Backend(error, results), prepared,
                      fit_settings.Checked(fit_settings.config_tree(est.getOrDefault, 2, optimizer, "none"), 1))


def test_a_rank_that_failed_past_its_retries_is_one_line_naming_the_run(tmp_path):
    from hvdkeras.common.errors import PeerLostError, RankFailedError

    with pytest.raises(PeerLostError, match=r"^fit stopped: a rank failed \(rank 1 on h exited with status -9\) and 1"
                                            r" retry; rank 0's checkpoints are in .*: fit again with run_id='r1'"):
        _train(tmp_path, RankFailedError("rank 1 on h exited with status -9"))


def test_a_user_error_a_rank_met_is_raised_on_the_driver_typed_and_unretried(tmp_path):
    from hvdkeras.common.errors import ConfigError
    from hvdkeras.engines.failures import Refused

    refused = ConfigError("trainer.epochs must be at least 1 (Received: 0)", key="trainer.epochs")
    with pytest.raises(ConfigError, match=r"^trainer\.epochs must be at least 1 \(Received: 0\)$") as error:
        _train(tmp_path, None, results=[Refused(refused), None])
    assert error.value.key == "trainer.epochs"


def test_a_failure_on_the_driver_is_not_reported_as_a_lost_rank(tmp_path):
    with pytest.raises(ZeroDivisionError):
        _train(tmp_path, ZeroDivisionError("a bug on the driver"))


def test_gradient_compression_is_read_from_horovods_compression_object():
    from hvdkeras.keras import Compression

    assert fit_settings.compression(KerasEstimator(gradient_compression=Compression.fp16).getOrDefault) == "fp16"
    assert fit_settings.compression(KerasEstimator(gradient_compression=Compression.none).getOrDefault) == "none"
    assert fit_settings.compression(KerasEstimator().getOrDefault) == "none"

    class NotFp16:  # a name holding "fp16" is not Horovod's fp16 compression
        pass

    with pytest.raises(SetupError, match=r"^gradient_compression must be Horovod's Compression.fp16 or Compression"
                                         r".none \(Received: gradient_compression=<class .*NotFp16'>\)$"):
        fit_settings.compression(KerasEstimator(gradient_compression=NotFp16).getOrDefault)


def test_where_a_fits_time_went_adds_up_and_names_what_rank_0_did_not_see():
    from hvdkeras.spark.keras.estimator import _fit_seconds

    found = _fit_seconds({"checks": 0.5, "data": 3.0, "prepare_ranks": 0.25}, 20.0,
                         {"start": 6.0, "fetch": 0.1, "setup": 3.0, "training": 8.0, "publish": 0.4}, 0.75)
    assert list(found) == ["checks", "data", "prepare_ranks", "ranks", "rank_start", "rank_fetch", "rank_setup",
                           "rank_training", "rank_publish", "ranks_other", "model_back", "total"]
    assert found["ranks_other"] == 2.5  # Spark's start of the tasks and the results' way back
    assert found["total"] == 24.5


def test_horovods_shuffle_and_backward_passes_per_step_reach_the_ranks():
    from hvdkeras import config as config_lib
    from hvdkeras.runtime.compat import keras

    sgd = keras.optimizers.SGD(0.1)
    est = KerasEstimator(shuffle=False, backward_passes_per_step=4)
    assert est.getShuffle() is False and est.getBackwardPassesPerStep() == 4
    tree = fit_settings.config_tree(est.getOrDefault, 2, sgd, fit_settings.compression(est.getOrDefault))
    config = config_lib.from_dict(tree)
    assert config.horovod.backward_passes_per_step == 4
    assert KerasEstimator().getShuffle() is True and KerasEstimator().getBackwardPassesPerStep() == 1
    assert est._job(keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)]), sgd, "mse")["shuffle"] == "false"


@pytest.mark.parametrize("name, value, line", [
    ("backward_passes_per_step", 0, "backward_passes_per_step must be a whole number of at least 1"
                                    " (Received: backward_passes_per_step=0)"),
    ("shuffle", "no", "shuffle must be True or False (Received: shuffle='no')"),
    ("use_gpu", 1, "use_gpu must be True or False (Received: use_gpu=1)"),
])
def test_a_bad_flag_or_accumulation_is_one_line_before_anything_is_written(name, value, line):
    from hvdkeras.runtime.compat import keras

    with pytest.raises(SetupError) as error:
        fit_settings.config_tree(KerasEstimator(**{name: value}).getOrDefault, 2, keras.optimizers.SGD(0.1), "none")
    assert str(error.value) == line


@pytest.mark.parametrize("value", [0, -3, 2.5, "10", None, True])
def test_a_bad_partitions_per_process_is_one_line_before_the_data_is_looked_at(value):
    with pytest.raises(SetupError) as error:
        KerasEstimator(partitions_per_process=value)._fit(object())  # not a DataFrame: never reached
    assert str(error.value) == ("partitions_per_process must be a whole number of at least 1"
                                f" (Received: partitions_per_process={value!r})")


def test_through_spark_connect_a_backend_without_num_proc_is_one_line_and_a_given_one_is_bound_to_the_session():
    # A Spark Connect client (Databricks' standard access mode, serverless) cannot count the executors' task slots.
    session = object()
    with pytest.raises(SetupError) as error:
        SparkBackend(session=session)
    assert str(error.value) == ("through Spark Connect, give num_proc (KerasEstimator(num_proc=...) or"
                                " SparkBackend(num_proc=...)): a Connect client cannot count the executors' task"
                                " slots")
    given = SparkBackend(num_proc=2, session=session)
    assert given.through(object()) is given  # its own session stays
    assert KerasEstimator(backend=given)._backend(session) is given
    plain = SparkBackend(num_proc=2)  # the user's, for a classic session: a fit on a Connect DataFrame binds a copy
    bound = KerasEstimator(backend=plain)._backend(session)
    assert bound is not plain and bound.through(object()) is bound and bound.num_processes() == 2
