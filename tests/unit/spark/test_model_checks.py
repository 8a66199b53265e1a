"""hvdkeras.spark.keras.model_checks: the model's inputs against the surveyed columns' lengths, before any write."""
import pytest

from hvdkeras.common.errors import SetupError
from hvdkeras.runtime.compat import keras
from hvdkeras.spark.common.data import ColumnInfo
from hvdkeras.spark.keras import model_checks


def _model():
    image, extra = keras.Input((8, 8, 1), name="image"), keras.Input((3,), name="extra")
    x = keras.layers.Concatenate()([keras.layers.Flatten()(image), extra])
    return keras.Model([image, extra], keras.layers.Dense(2)(x))


def _columns(**sizes):
    return {name: ColumnInfo(name, "array", size, "array<double>") for name, size in sizes.items()}


def test_each_input_takes_its_shape_from_a_column_of_as_many_values():
    assert model_checks.feature_shapes(_model(), ["features", "extra"], _columns(features=64, extra=3)) == (
        (8, 8, 1), (3,))


def test_a_column_whose_length_does_not_fit_its_input_is_one_line_naming_both():
    with pytest.raises(SetupError) as error:
        model_checks.feature_shapes(_model(), ["extra", "extra"], _columns(extra=3))
    assert str(error.value) == ("feature column 'extra' holds 3 values per row, but the model's input 'image' takes"
                                " shape (8, 8, 1) (64 values); reshape the column or the input")


def test_inputs_not_one_per_feature_column_is_one_line():
    with pytest.raises(SetupError, match=r"^the model has 2 inputs but feature_cols names 1 columns \['features'\]"):
        model_checks.feature_shapes(_model(), ["features"], _columns(features=64))
