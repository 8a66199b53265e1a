"""hvdkeras.spark.common.data: the validation parameter's one-line refusals (no Spark needed for these)."""
import pytest

from hvdkeras.common.errors import SetupError
from hvdkeras.spark.common.data import validation_split


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
