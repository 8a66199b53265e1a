"""Horovod's own Spark Keras tests, as a user switches them by their import lines, on local[2].

The driver (``scripts/horovod_spark_keras_check.py``) runs, in one SparkSession, each scenario of Horovod's
``test/integration/test_spark_keras.py`` that uses only Horovod's public API, with ``import hvdkeras.spark.keras as
hvd`` and Keras 3's own migration; what the originals read of Horovod's internals is replaced by what a user sees.
They run on keras3, where Horovod's own Spark estimator cannot: the same scenarios passed on keras2 by hand
(``HVDKERAS_ONCE_TESTS=all`` runs them here too), and keras2's suite runs the estimator on local[2] in test_spark.py.
"""
import os
import sys

import pytest

from tests.harness.ranks import SCRIPTS, launch, results
from tests.harness.stacks import once_per_make_test

pytest.importorskip("pyspark", reason="the [spark] extra is not installed (pip install hvdkeras[spark])")
pytestmark = once_per_make_test("Horovod's Spark Keras tests switched by their imports", 2.5, stack="keras3")

CHECK = os.path.join(SCRIPTS, "horovod_spark_keras_check.py")
SCENARIOS = ["test_fit_model", "test_fit_model_with_tensorflow_dataset_prefetch_buffer_size",
             "test_fit_model_multiclass", "test_restore_from_checkpoint", "test_keras_direct_parquet_train",
             "test_keras_model_checkpoint_callback", "test_model_serialization"]


@pytest.fixture(scope="module")
def outcome(tmp_path_factory):
    (result,) = results(launch([sys.executable, CHECK, str(tmp_path_factory.mktemp("horovod_spark"))], timeout=600))
    return result


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_horovods_spark_keras_scenario_passes_switched_by_its_imports(outcome, scenario):
    assert outcome[scenario] == "passed"
