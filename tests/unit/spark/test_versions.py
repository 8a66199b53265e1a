"""hvdkeras.spark.common.versions: packages pip installs together that cannot run together, one line each."""
import pytest

from hvdkeras.common.errors import SetupError
from hvdkeras.spark.common import versions


def installed(**found):
    return lambda name: found.get(name)


@pytest.mark.parametrize("pyarrow, numpy", [("26.0.1", "1.26.4"), ("27.0.0", "1.23.5")])
def test_pyarrow_26_or_newer_with_numpy_1_is_one_line_naming_the_pin(pyarrow, numpy):
    # measured: pyarrow 26.0.1 with NumPy 1.26.4 refuses to import (Python 3.11 and 3.12, where pip takes it);
    # 22.0.0, 23.0.0 and 25.0.1 import and convert arrays with that NumPy
    assert versions.mismatch(installed(pyarrow=pyarrow, numpy=numpy)) == (
        f"pyarrow {pyarrow} needs NumPy 2, and this environment has NumPy {numpy} (TensorFlow 2.17 and older, or"
        " pyspark 3.5's [sql] extra, keep NumPy 1): pip install 'pyarrow<26'")


@pytest.mark.parametrize("found", [dict(pyarrow="25.0.1", numpy="1.26.4"), dict(pyarrow="26.0.1", numpy="2.4.6"),
                                   dict(numpy="1.26.4"), dict(pyarrow="26.0.1"), dict(pyarrow="dev", numpy="1.26")])
def test_what_runs_together_or_cannot_be_told_passes(found):
    assert versions.mismatch(installed(**found)) is None


def test_the_estimator_stops_before_anything_runs_and_names_itself(monkeypatch):
    from hvdkeras.spark.keras.estimator import KerasEstimator

    monkeypatch.setattr(versions, "mismatch", lambda: "pyarrow 26.0.1 needs NumPy 2, ...")
    with pytest.raises(SetupError) as error:
        KerasEstimator()._fit_run(lambda store, num_proc, index: pytest.fail("the data was looked at"), False)
    assert str(error.value) == "KerasEstimator.fit cannot run: pyarrow 26.0.1 needs NumPy 2, ..."
