"""hvdkeras.spark.common.data: the validation parameter's one-line refusals and the files per rank (no Spark needed)."""
import pytest

from hvdkeras.common.errors import SetupError
from hvdkeras.spark.common.data import files_per_rank, validation_split
from hvdkeras.spark.common.parquet_writer import CHUNK


@pytest.mark.parametrize("validation, message", [
    (1.5, "validation=1.5: a fraction of the rows must be in [0, 1)"),
    (True, "validation must be a fraction in [0, 1) or a column's name (Received: True)"),
    ([0.1], "validation must be a fraction in [0, 1) or a column's name (Received: [0.1])"),
])
def test_a_bad_validation_is_one_line(validation, message):
    with pytest.raises(SetupError) as error:
        validation_split(object(), validation, seed=1)
    assert str(error.value) == message


def test_no_validation_keeps_every_row():
    df = object()
    assert validation_split(df, None, seed=1) == (df, None)
    assert validation_split(df, 0.0, seed=1) == (df, None)


@pytest.mark.parametrize("rows, files", [(0, 1), (192, 1), (2 * CHUNK, 1), (2 * CHUNK + 1, 2), (7 * 2 * CHUNK, 7),
                                         (10**9, 10)])
def test_a_ranks_files_hold_a_row_group_each_up_to_partitions_per_process(rows, files):
    # two ranks, partitions_per_process=10: a file per Spark task to write, and a small table's would hold a few rows
    assert files_per_rank(rows, 2, 10) == files
    assert files_per_rank(rows, 2, 1) == 1  # a user's smaller setting still holds
