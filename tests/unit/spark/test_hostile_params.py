"""The Spark estimator's parameters, run_id and store URLs, generated hostile: each is taken or is one line.

Property-based (tests/harness/hostile.py): the numeric parameters the ranks' config is built from (checked on the
driver before a fit writes anything), a run_id (a name, never a path), and a store URL or path (a store, or one
line; nothing created outside the folder the test runs in). No Spark session is started.
"""
import math
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("pyspark")

from hvdkeras.runtime.compat import keras  # noqa: E402
from hvdkeras.spark.common import runs  # noqa: E402
from hvdkeras.spark.common.store import Store  # noqa: E402
from hvdkeras.spark.keras import fit_settings  # noqa: E402
from hvdkeras.spark.keras.estimator import KerasEstimator  # noqa: E402
from tests.harness.hostile import PROPERTY, hostile_text, one_line  # noqa: E402

OPTIMIZER = keras.optimizers.SGD(0.1)
NUMBERS = st.one_of(st.integers(-2**70, 2**70), st.floats(allow_nan=True, allow_infinity=True), st.booleans(),
                    st.none(), hostile_text, st.just([1, 2]), st.just(math.inf))
NUMERIC = ("batch_size", "val_batch_size", "epochs", "verbose", "random_seed", "train_steps_per_epoch")


@PROPERTY
@given(st.fixed_dictionaries({}, optional={name: NUMBERS for name in NUMERIC}))
def test_the_numeric_parameters_give_a_checked_config_or_one_line(params):
    tree = one_line(lambda: fit_settings.config_tree(KerasEstimator(**params).getOrDefault, 2, OPTIMIZER, "none"))
    if isinstance(tree, str):
        return
    assert tree["data"]["per_rank_batch_size"] >= 1 and tree["trainer"]["epochs"] >= 1
    assert all(isinstance(params.get(n), int) for n in NUMERIC if params.get(n) is not None)


@PROPERTY
@given(st.one_of(hostile_text, st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True)))
def test_a_run_id_is_a_plain_name_or_one_line(run_id):
    checked = one_line(lambda: runs.check_run_id(run_id))
    if checked == run_id:
        assert "/" not in run_id and "\\x00" not in run_id and run_id not in (".", "..") and not run_id.startswith(".")


URLS = st.one_of(hostile_text, st.tuples(st.sampled_from(["file://", "memory://", "s3://", "gs://", "abfs://", "hdfs://",
                                                          "dbfs:/", "/dbfs/", "nope://", "ftp:/", "../", "~/", ""]),
                                         hostile_text).map("".join))


@PROPERTY
@given(url=URLS)
def test_a_store_url_is_a_store_or_one_line(url, tmp_path_factory):
    folder = tmp_path_factory.mktemp("store")
    here = os.getcwd()
    os.chdir(folder)  # a relative path lands here, not in the checkout
    try:
        one_line(lambda: Store.create(url))
    finally:
        os.chdir(here)
