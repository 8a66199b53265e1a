"""A DataFrame made ready for training, on the driver: checked, split, written once to Parquet in the store.

:func:`prepare` checks the columns (present, a type a model can take, one length per
column, not empty), splits off the validation rows (a fraction or a column, as Horovod's
``validation``), turns vectors (``DenseVector``, ``SparseVector``) into float arrays and
writes the training and validation rows with Spark into the store's
``intermediate_train_data.<idx>`` and ``intermediate_val_data.<idx>``. What the ranks
need to read them back (:mod:`hvdkeras.spark.common.reader`) is the returned
:class:`PreparedData`. No TensorFlow here.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from hvdkeras.common.errors import SetupError
from hvdkeras.spark.common import parquet_writer
from hvdkeras.spark.common.store import FilesystemStore


@dataclasses.dataclass(frozen=True)
class ColumnInfo:
    """One training column as written to Parquet.

    Attributes:
        name: the column's name.
        kind: ``"vector"`` (a Spark ML vector, written as a float array), ``"array"`` or ``"scalar"``.
        size: the values per row (1 for a scalar).
        spark_type: the column's Spark SQL type, as Spark names it (``"vector"``, ``"array<double>"``, ``"int"``).
    """

    name: str
    kind: str
    size: int
    spark_type: str


@dataclasses.dataclass(frozen=True)
class PreparedData:
    """Where the prepared rows are and what they hold.

    Attributes:
        train_path: the training rows' Parquet folder (a store URL).
        val_path: the validation rows' folder, or ``None`` without validation.
        train_rows: the number of training rows.
        val_rows: the number of validation rows.
        columns: each training column's :class:`ColumnInfo`, by name.
        feature_cols: the feature columns, one per model input, in order.
        label_cols: the label columns, one per model output, in order.
        sample_weight_col: the weight column, or ``None``.
    """

    train_path: str
    val_path: Optional[str]
    train_rows: int
    val_rows: int
    columns: Dict[str, ColumnInfo]
    feature_cols: Tuple[str, ...]
    label_cols: Tuple[str, ...]
    sample_weight_col: Optional[str]


NUMERIC = ("tinyint", "smallint", "int", "bigint", "float", "double", "boolean")


def _column_names(df: Any) -> List[str]:
    return [field.name for field in df.schema.fields]


def check_present(df: Any, columns: Sequence[str], param: str) -> None:
    """One line when a column ``param`` names is not in ``df``.

    Raises:
        SetupError: naming the column, the parameter and the DataFrame's columns.
    """
    have = _column_names(df)
    for column in columns:
        if column not in have:
            raise SetupError(f"{param} names column {column!r}, which the DataFrame does not have"
                             f" (Received columns: {have}); fix {param} or add the column")


def _kind(df: Any, column: str) -> Tuple[str, str]:
    """(``"vector"`` | ``"array"`` | ``"scalar"``, the Spark type's name); one line for a type no model takes."""
    data_type = df.schema[column].dataType
    name = data_type.simpleString()
    if type(data_type).__name__ == "VectorUDT":
        return "vector", "vector"
    if name.startswith("array<") and name[len("array<"):-1] in NUMERIC:
        return "array", name
    if name in NUMERIC:
        return "scalar", name
    raise SetupError(f"column {column!r} holds {name}, which a Keras model cannot take; give it numbers, arrays of"
                     " numbers or Spark ML vectors (a StringIndexer or a VectorAssembler makes them)")


def validation_split(df: Any, validation: Union[None, float, str], seed: Optional[int]) -> Tuple[Any, Optional[Any]]:
    """(training rows, validation rows or ``None``), as Horovod's ``validation`` parameter reads.

    Args:
        df: the DataFrame.
        validation: ``None`` (no validation); a fraction in ``[0, 1)`` of the rows, drawn at random
            (``seed``); or a column's name, whose true (or positive) rows validate. The column is dropped.
        seed: the random split's seed.

    Raises:
        SetupError: a fraction outside ``[0, 1)``, a missing column, or another type.
    """
    if validation is None or (isinstance(validation, float) and validation == 0.0):
        return df, None
    if isinstance(validation, bool) or not isinstance(validation, (float, int, str)):
        raise SetupError(f"validation must be a fraction in [0, 1) or a column's name (Received: {validation!r})")
    if isinstance(validation, str):
        check_present(df, [validation], "validation")
        column = df[validation]
        is_bool = df.schema[validation].dataType.simpleString() == "boolean"
        val = df.filter(column if is_bool else column > 0).drop(validation)
        train = df.filter(~column if is_bool else column == 0).drop(validation)
        return train, val
    if not 0.0 <= float(validation) < 1.0:
        raise SetupError(f"validation={validation!r}: a fraction of the rows must be in [0, 1)")
    train, val = df.randomSplit([1.0 - float(validation), float(validation)], seed=seed)
    return train, val


def _as_arrays(df: Any, infos: Dict[str, ColumnInfo]) -> Any:
    """``df`` with vector columns as float arrays, and float64 values as float32 (what Keras computes in)."""
    from pyspark.ml.functions import vector_to_array
    from pyspark.sql import functions as F

    for info in infos.values():
        if info.kind == "vector":
            df = df.withColumn(info.name, vector_to_array(F.col(info.name), dtype="float32"))
        elif info.spark_type == "array<double>":
            df = df.withColumn(info.name, F.col(info.name).cast("array<float>"))
        elif info.spark_type == "double":
            df = df.withColumn(info.name, F.col(info.name).cast("float"))
    return df


FLOATS = ("float", "double")


def _bad_values(column: str, kind: str, spark_type: str, allow_nan: bool) -> Tuple[Any, Optional[Any]]:
    """(a row holds a null, a row holds a value that is not finite) as Spark conditions on ``column``.

    NaN counts as not finite unless ``allow_nan``. The second is None for a column of integers, which hold
    neither NaN nor infinities.
    """
    from pyspark.ml.functions import vector_to_array
    from pyspark.sql import functions as F

    def not_finite(x: Any) -> Any:
        infinite = F.abs(x) == float("inf")
        return infinite if allow_nan else F.isnan(x) | infinite

    element = spark_type if kind == "scalar" else spark_type[len("array<"):-1]
    floats = kind == "vector" or element in FLOATS
    if kind == "scalar":
        return F.col(column).isNull(), not_finite(F.col(column)) if floats else None
    present = F.col(column).isNotNull()  # vector_to_array fails on a null vector: counted as null, not converted
    values = F.when(present, vector_to_array(F.col(column))) if kind == "vector" else F.col(column)
    null = ~present | F.exists(values, lambda x: x.isNull())
    return null, F.exists(values, not_finite) if floats else None


def survey(df: Any, columns: Sequence[str], allow_nan: bool = False) -> Tuple[int, Dict[str, ColumnInfo]]:
    """(rows, each column's :class:`ColumnInfo`) from one Spark aggregate over every row, not a collect.

    Args:
        df: the DataFrame (every row: training and validation).
        columns: the feature, label and weight columns.
        allow_nan: let NaN through (for a model built to take it); infinities and nulls are still refused.

    Raises:
        SetupError: naming the first column holding nulls, NaN or infinities (and in how many rows), or vectors or
            arrays of uneven length.
    """
    from pyspark.ml.functions import vector_to_array
    from pyspark.sql import functions as F

    kinds = {column: _kind(df, column) for column in columns}
    aggregates = [F.count(F.lit(1)).alias("__rows")]
    for column, (kind, spark_type) in kinds.items():
        for name, condition in zip(("null", "nan"), _bad_values(column, kind, spark_type, allow_nan)):
            if condition is not None:
                aggregates.append(F.sum(F.when(condition, 1).otherwise(0)).alias(f"{name}:{column}"))
        if kind != "scalar":  # the lengths of the rows that hold one (vector_to_array fails on a null vector)
            present = F.col(column).isNotNull()
            values = vector_to_array(F.col(column)) if kind == "vector" else F.col(column)
            length = F.when(present, F.size(values))
            aggregates += [F.min(length).alias(f"min:{column}"), F.max(length).alias(f"max:{column}")]
    found = df.agg(*aggregates).first().asDict()
    total = int(found["__rows"])
    for column in columns:
        nulls, not_finite = int(found.get(f"null:{column}") or 0), int(found.get(f"nan:{column}") or 0)
        if nulls:
            raise SetupError(f"column {column!r} holds nulls in {nulls} of {total} rows: drop or fill them before fit()"
                             " (df.na.drop(subset=[...]) or df.na.fill(...))")
        if not_finite:
            what = "infinities" if allow_nan else "NaN or infinities"
            hint = "" if allow_nan else " (or pass allow_nan=True for a model built to take NaN)"
            raise SetupError(f"column {column!r} holds {what} in {not_finite} of {total} rows: drop or fix them"
                             f" before fit(){hint}")
    infos = {}
    for column, (kind, spark_type) in kinds.items():
        size = 1
        if kind != "scalar":
            low, high = found[f"min:{column}"], found[f"max:{column}"]
            if total and low != high:
                raise SetupError(f"column {column!r} holds {kind}s of {low} to {high} values; every row must hold"
                                 " the same number (the model's input has one shape)")
            size = int(high or 0)
        infos[column] = ColumnInfo(column, kind, size, spark_type)
    return total, infos


ROW = "__hvdkeras_row"  # each row's place in the DataFrame, which orders the rows inside each Parquet file


def _ordered(df: Any, files: int) -> Any:
    """``df`` in ``files`` partitions, the rows of each in :data:`ROW` order, which it then drops. A round-robin
    repartition puts the same rows in each partition every time, but in the order their shuffle blocks arrive from
    the executors, which varies between fits; each rank's epoch shuffle permutes rows by position, so two fits with
    the same seed trained on other batches (found by the Spark soak: epoch 1's loss differed between two fresh
    fits)."""
    return df.repartition(files).sortWithinPartitions(ROW).drop(ROW)


def files_per_rank(rows: int, num_proc: int, most: int) -> int:
    """Parquet files per rank for ``rows`` rows: ``most`` (``partitions_per_process``), or fewer, so that each file
    holds at least one row group of the writer's (:data:`hvdkeras.spark.common.parquet_writer.CHUNK` rows) and at
    least one file per rank. Each file costs a Spark task to write, and a rank reads its rows the same way whatever
    the files, so a small table goes in a few files rather than many of a few rows each.

    Args:
        rows: the DataFrame's rows.
        num_proc: the number of ranks.
        most: the files per rank of a table large enough.
    """
    return max(1, min(most, -(-rows // (num_proc * parquet_writer.CHUNK))))


def prepare(df: Any, store: FilesystemStore, num_proc: int, feature_cols: Sequence[str], label_cols: Sequence[str],
            sample_weight_col: Optional[str] = None, validation: Union[None, float, str] = None,
            seed: Optional[int] = None, partitions_per_process: int = 10, dataset_idx: Union[None, int, str] = None,
            allow_nan: bool = False,
            check_columns: Optional[Callable[[Dict[str, ColumnInfo]], Any]] = None) -> PreparedData:
    """Checks ``df``'s training columns, splits off validation and writes both to Parquet in ``store``.

    Args:
        df: the DataFrame to train on.
        store: where the Parquet goes (``store.get_train_data_path(dataset_idx)``, and the validation path).
        num_proc: the number of ranks that will read it (each gets its own rows).
        feature_cols: the feature columns, one per model input, in order.
        label_cols: the label columns, one per model output, in order.
        sample_weight_col: a column of per-row loss weights, or ``None``.
        validation: see :func:`validation_split`.
        seed: the random validation split's seed.
        partitions_per_process: Parquet files per rank at most (:func:`files_per_rank`).
        dataset_idx: the suffix of the store's data paths (Horovod's ``dataset_idx``; each fit has its own).
        allow_nan: let NaN through in the columns (:func:`survey`).
        check_columns: called with the surveyed columns' infos before anything is written (the model's inputs
            against the columns' lengths); what it raises ends the fit.

    Returns:
        Where the rows went and what they hold.

    Raises:
        SetupError: a missing column, a type no model takes, nulls, NaN or infinities, columns of uneven length or
            no rows, each found before anything is written; fewer training or validation rows than ranks, found as
            they are written.
    """
    if not feature_cols:
        raise SetupError("feature_cols is empty: name the DataFrame columns the model takes, one per input")
    if not label_cols:
        raise SetupError("label_cols is empty: name the DataFrame columns the model learns, one per output")
    check_present(df, feature_cols, "feature_cols")
    check_present(df, label_cols, "label_cols")
    weights = [sample_weight_col] if sample_weight_col else []
    check_present(df, weights, "sample_weight_col")
    columns = list(dict.fromkeys([*feature_cols, *label_cols, *weights]))
    split_by = [validation] if isinstance(validation, str) and validation not in columns else []
    check_present(df, split_by, "validation")
    from pyspark.sql import functions as F

    # Two passes over the rows: one aggregate (the checks, the lengths, the count), then one job writing the
    # training and the validation rows. (Holding the selected columns in Spark's cache between the two made a
    # small fit's data step slower, not faster.)
    selected = df.select(*columns, *split_by).withColumn(ROW, F.monotonically_increasing_id())
    total, infos = survey(selected, columns, allow_nan=allow_nan)
    if total == 0:
        raise SetupError("the DataFrame has no rows to train on; give fit() a DataFrame with data")
    if check_columns is not None:
        check_columns(infos)
    train, val = validation_split(selected, validation, seed)
    train_path, val_path = store.get_train_data_path(dataset_idx), None
    files = num_proc * files_per_rank(total, num_proc, partitions_per_process)
    parts = [(train_path, _ordered(_as_arrays(train.select(*columns, ROW), infos), files))]
    if val is not None:
        val_path = store.get_val_data_path(dataset_idx)
        parts.append((val_path, _ordered(_as_arrays(val.select(*columns, ROW), infos), num_proc)))
    written = parquet_writer.write_folders(store, parts, partitions=[files, num_proc][:len(parts)])
    rows, val_rows = written[0][1], (written[1][1] if val_path else 0)
    # Found once written (the fit removes its intermediate data, whatever ends it): the split's rows are counted
    # as they are written, rather than in a pass of their own.
    if rows == 0:
        raise SetupError("the DataFrame has no rows to train on after the validation split; give fit() a DataFrame"
                         " with more data")
    if rows < num_proc:
        raise SetupError(f"the DataFrame has {rows} training rows, fewer than the {num_proc} ranks: every rank needs"
                         " at least one; lower num_proc or give it more rows")
    if val_path and val_rows < num_proc:
        raise SetupError(f"validation holds {val_rows} rows, fewer than the {num_proc} ranks; validate on more"
                         " rows, or pass validation=None")
    return PreparedData(train_path=train_path, val_path=val_path, train_rows=rows, val_rows=val_rows, columns=infos,
                        feature_cols=tuple(feature_cols), label_cols=tuple(label_cols),
                        sample_weight_col=sample_weight_col)


def _parquet_column(store: FilesystemStore, path: str, column: str, field: Any, first_file: str) -> ColumnInfo:
    """One column of Parquet a user wrote, as :class:`ColumnInfo`; one line for a type no model takes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    kind_of = field.type
    if pa.types.is_list(kind_of) or pa.types.is_large_list(kind_of) or pa.types.is_fixed_size_list(kind_of):
        element = kind_of.value_type
        if not (pa.types.is_integer(element) or pa.types.is_floating(element) or pa.types.is_boolean(element)):
            raise SetupError(f"column {column!r} of the Parquet in {path} holds {kind_of}, which a Keras model cannot"
                             " take; write arrays of numbers")
        with store.fs.open(first_file, "rb") as f:
            first = pq.ParquetFile(f).read_row_group(0, columns=[column]).column(0)
        size = len(first[0].as_py() or []) if len(first) else 0
        return ColumnInfo(column, "array", size, f"array<{element}>")
    if pa.types.is_integer(kind_of) or pa.types.is_floating(kind_of) or pa.types.is_boolean(kind_of):
        return ColumnInfo(column, "scalar", 1, str(kind_of))
    what = "a Spark ML vector (a struct)" if pa.types.is_struct(kind_of) else str(kind_of)
    raise SetupError(f"column {column!r} of the Parquet in {path} holds {what}, which the ranks cannot read; write"
                     " numbers or arrays of numbers (pyspark.ml.functions.vector_to_array turns a vector into one)")


def from_parquet(store: FilesystemStore, num_proc: int, feature_cols: Sequence[str], label_cols: Sequence[str],
                 sample_weight_col: Optional[str] = None, dataset_idx: Union[None, int, str] = None) -> PreparedData:
    """Parquet already in the store (Horovod's ``fit_on_parquet``): the training rows at
    ``store.get_train_data_path(dataset_idx)``, and validation rows at the validation path when it holds Parquet.

    Args:
        store: the store holding the Parquet.
        num_proc: the number of ranks that will read it.
        feature_cols: the feature columns, one per model input, in order.
        label_cols: the label columns, one per model output, in order.
        sample_weight_col: a column of per-row loss weights, or ``None``.
        dataset_idx: the suffix of the store's data paths.

    Returns:
        Where the rows are and what they hold.

    Raises:
        SetupError: no Parquet at the training path, a missing column or one no model takes, fewer rows than ranks.
    """
    import pyarrow.parquet as pq

    from hvdkeras.spark.common.reader import count_rows, parquet_files

    if not feature_cols or not label_cols:
        raise SetupError("fit_on_parquet needs feature_cols and label_cols: name the Parquet's columns the model takes"
                         " and learns")
    train_path, val_path = store.get_train_data_path(dataset_idx), store.get_val_data_path(dataset_idx)
    if not store.is_parquet_dataset(train_path):
        raise SetupError(f"fit_on_parquet found no Parquet at {train_path}: write the training rows there"
                         " (df.write.parquet(store.get_train_data_path())), or call fit(df)")
    files = parquet_files(store, train_path)
    with store.fs.open(files[0][0], "rb") as f:
        schema = pq.ParquetFile(f).schema_arrow
    weights = [sample_weight_col] if sample_weight_col else []
    columns = list(dict.fromkeys([*feature_cols, *label_cols, *weights]))
    infos = {}
    for column in columns:
        if column not in schema.names:
            raise SetupError(f"feature_cols, label_cols or sample_weight_col names column {column!r}, which the Parquet"
                             f" in {train_path} does not have (Received columns: {schema.names})")
        infos[column] = _parquet_column(store, train_path, column, schema.field(column), files[0][0])
    rows = sum(n for _, n in files)
    if rows < num_proc:
        raise SetupError(f"the Parquet in {train_path} has {rows} rows, fewer than the {num_proc} ranks: every rank"
                         " needs at least one")
    has_val = store.is_parquet_dataset(val_path)
    return PreparedData(train_path=train_path, val_path=val_path if has_val else None, train_rows=rows,
                        val_rows=count_rows(store, val_path) if has_val else 0, columns=infos,
                        feature_cols=tuple(feature_cols), label_cols=tuple(label_cols),
                        sample_weight_col=sample_weight_col)
