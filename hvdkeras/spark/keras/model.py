"""Horovod's ``KerasModel``: the trained model as a Spark ML ``Transformer``, and its persistence.

``transform(df)`` adds the predictions with one vectorized UDF over the feature columns, the model loaded once per
Python worker (:mod:`hvdkeras.spark.keras.transform`). ``save(path)`` / ``KerasModel.load(path)``, also inside a
``PipelineModel``, write and read plain JSON and the ``.keras`` file (:mod:`hvdkeras.spark.keras.persistence`).
"""
from __future__ import annotations

from typing import Any, Dict, List

import numpy as np
from pyspark import keyword_only
from pyspark.ml import Model
from pyspark.ml.param.shared import HasOutputCols
from pyspark.ml.util import MLReadable, MLReader, MLWritable, MLWriter
from pyspark.sql import functions as F

from hvdkeras.common.errors import SetupError
from hvdkeras.spark.common import versions
from hvdkeras.spark.common.connect import is_connect
from hvdkeras.spark.common.data import check_present
from hvdkeras.spark.keras import transform
from hvdkeras.spark.keras.params import MODEL_PARAMS, check_kwargs, declare
from hvdkeras.spark.keras.persistence import ParamsReader, ParamsWriter
from hvdkeras.spark.keras.serialization import model_to_bytes


class KerasModel(Model, HasOutputCols, MLWritable, MLReadable):
    """The trained model as a Spark ML ``Transformer``: ``transform(df)`` adds one output column per label column.

    The output columns default to ``<label>__output`` (``setOutputCols`` renames them). A
    model output of one value per row is a ``double`` column; more values are a
    ``DenseVector`` column (an ``array<float>`` when the label column was an array).
    """

    _input_kwargs: Dict[str, Any]  # pyspark's keyword_only keeps the call's keywords here

    @keyword_only
    def __init__(self, **kwargs: Any):
        super().__init__()
        self._setDefault(**{name: default for name, _, default, _ in MODEL_PARAMS})
        check_kwargs({k: v for k, v in self._input_kwargs.items() if k != "outputCols"}, MODEL_PARAMS, "KerasModel")
        self._set(**self._input_kwargs)
        labels = self._input_kwargs.get("label_columns")
        if labels and "outputCols" not in self._input_kwargs:
            self._set(outputCols=[f"{c}__output" for c in labels])

    def setOutputCols(self, value: List[str]) -> "KerasModel":
        """Names the prediction columns, one per label column; returns self."""
        return self._set(outputCols=list(value))

    def _transform(self, dataset: Any) -> Any:
        versions.require_compatible("KerasModel.transform")
        features = list(self.getOrDefault("feature_columns"))
        outputs = list(self.getOrDefault("outputCols"))
        labels = list(self.getOrDefault("label_columns"))
        batch_size = self.getOrDefault("predict_batch_size")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise SetupError(f"predict_batch_size must be a whole number of at least 1 (Received: {batch_size!r})")
        if len(outputs) != len(labels):
            raise SetupError(f"setOutputCols got {len(outputs)} names for {len(labels)} label columns {labels}")
        check_present(dataset, features, "the model's feature_columns")
        for name in outputs:
            if name in dataset.columns:
                raise SetupError(f"the DataFrame already has a column {name!r}; setOutputCols to other names")
        model = self.getOrDefault("model")
        sizes = []
        for tensor in (model.outputs if isinstance(model.outputs, (list, tuple)) else [model.outputs]):
            dims = [int(d) for d in tuple(tensor.shape)[1:] if d is not None]
            sizes.append(int(np.prod(dims)) if dims else 1)
        input_shapes = [tuple(-1 if d is None else int(d) for d in tuple(t.shape)[1:]) for t in model.inputs]
        label_types = {f.name: f.dataType for f in dataset.schema.fields}
        kinds = transform.output_kinds(sizes, [label_types.get(label) for label in labels])
        # A broadcast sends the model once to each executor; a Spark Connect session has none, and the model goes
        # with the function itself.
        blob = None if is_connect(dataset) else dataset.sparkSession.sparkContext.broadcast(model_to_bytes(model))
        saved = model_to_bytes(model) if blob is None else b""
        custom_objects = self.getOrDefault("custom_objects") or {}

        def arrow_body(*columns: Any) -> Any:
            return transform.predict_arrow(columns, blob.value if blob is not None else saved, custom_objects,
                                           features, input_shapes, kinds, batch_size)

        def pandas_body(*columns: Any) -> Any:
            return transform.predict_pandas(columns, blob.value if blob is not None else saved, custom_objects,
                                            features, input_shapes, kinds, batch_size)

        predict = versions.vectorized_udf(arrow_body, pandas_body, transform.udf_type(kinds))
        predicted = predict(*[transform.feature_column(dataset, name) for name in features])
        if len(outputs) == 1:
            return dataset.withColumn(outputs[0], transform.output_column(predicted, kinds[0]))
        staged = "__hvdkeras_predictions"
        while staged in dataset.columns:
            staged += "_"
        return (dataset.withColumn(staged, predicted)
                .withColumns({name: transform.output_column(F.col(staged)[f"o{i}"], kind)
                              for i, (name, kind) in enumerate(zip(outputs, kinds))})
                .drop(staged))

    # ------------------------------------------------------------------ persistence

    def write(self) -> MLWriter:
        """Spark ML's writer: ``model.write().overwrite().save(path)``."""
        return ParamsWriter(self)

    @classmethod
    def read(cls) -> MLReader:
        """Spark ML's reader: ``KerasModel.read().load(path)``, or ``KerasModel.load(path)``."""
        return ParamsReader(cls)

    @classmethod
    def load(cls, path: str, safe_mode: bool = True) -> "KerasModel":
        """The model saved at ``path``; ``safe_mode=False`` also loads what runs code when loaded (the earlier,
        pickled format; Keras' unsafe layers), for a folder whose origin you trust."""
        return ParamsReader(cls, safe_mode=safe_mode).load(path)


declare(KerasModel, MODEL_PARAMS)
