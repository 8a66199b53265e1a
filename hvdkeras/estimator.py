"""The old name of :mod:`hvdkeras.tf_estimator` (Horovod for ``tf.estimator`` code), kept so old imports work.

``hvdkeras.estimator`` sat beside ``hvdkeras.spark.keras``'s Spark ML ``KerasEstimator``; the module's name now says
which estimator it is. Importing it here says so in one warning line, and gives the same names.
"""
from __future__ import annotations

import warnings

from hvdkeras.tf_estimator import *  # noqa: F401,F403
from hvdkeras.tf_estimator import (  # noqa: F401  (the names a script of the old import uses)
    HorovodEstimator,
    SumMetricStatesHook,
    distributed_optimizer,
    eval_metric_ops,
    keras_estimator,
    learning_rate_tensor,
    session_config,
    train_from_config,
)

warnings.warn("hvdkeras.estimator is now hvdkeras.tf_estimator (the tf.estimator API; the Spark ML estimator is"
              " hvdkeras.spark.keras): import hvdkeras.tf_estimator instead", FutureWarning, stacklevel=2)
