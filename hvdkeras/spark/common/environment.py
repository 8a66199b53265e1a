"""The driver's environment that reaches a Spark fit's ranks: an allow-list, never the whole of it.

Each rank is a process of its own on an executor, started with an environment built on the driver
and carried in Spark's task messages. The driver's whole environment used to go (Horovod's
``SparkBackend`` sends it all), cloud credentials and every other secret of the driver's shell
included. :func:`for_ranks` keeps what a rank runs on:

* Horovod's, hvdkeras', Python's, TensorFlow's and Keras', CUDA's, NCCL's, the thread libraries',
  MPI's, Arrow's and Hadoop's variables, by prefix (:data:`PREFIXES`);
* the process basics (``PATH``, ``HOME``, ``LANG``, ``TMPDIR``, the CA bundles, the proxies...),
  by name (:data:`NAMES`);
* the store's credentials, only when the fit's store is of their kind (:func:`for_store`: ``AWS_*``
  for ``s3://``, ``GOOGLE_*`` for ``gs://``, ``AZURE_*`` for ``abfs://``...);
* whatever you name: ``SparkBackend(env=...)``, ``hvdkeras.spark.run(env=...)`` or the estimator's
  ``backend_env`` go whole.

No TensorFlow, no Spark here.
"""
from __future__ import annotations

from typing import Dict, Mapping, Optional, Tuple

PREFIXES: Tuple[str, ...] = (
    "HOROVOD_", "HVDKERAS_", "PYTHON", "TF_", "TENSORFLOW_", "KERAS_", "TFDS_", "XLA_", "CUDA_", "NCCL_", "NVIDIA_",
    "CUDNN_", "OMP_", "KMP_", "MKL_", "OPENBLAS_", "GLOO_", "OMPI_", "PMIX_", "UCX_", "FI_", "I_MPI_", "ARROW_",
    "HADOOP_", "LC_", "CONDA_",
)
NAMES = frozenset({
    "PATH", "LD_LIBRARY_PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TEMP", "TMP",
    "TERM", "VIRTUAL_ENV", "JAVA_HOME", "CLASSPATH", "KRB5CCNAME", "LIBHDFS_OPTS", "SSL_CERT_FILE", "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy",
    "no_proxy",
})
# A store's credentials and settings, by its protocol: they go only to the ranks of a fit on such a store.
STORE_PREFIXES: Dict[str, Tuple[str, ...]] = {
    "s3": ("AWS_",), "s3a": ("AWS_",),
    "gs": ("GOOGLE_", "GCLOUD_", "CLOUDSDK_", "GCE_"), "gcs": ("GOOGLE_", "GCLOUD_", "CLOUDSDK_", "GCE_"),
    "abfs": ("AZURE_",), "abfss": ("AZURE_",), "az": ("AZURE_",), "adl": ("AZURE_",),
}


def allowed(name: str) -> bool:
    """Whether the driver's variable ``name`` reaches the ranks without being named (:data:`PREFIXES`,
    :data:`NAMES`)."""
    return name in NAMES or name.startswith(PREFIXES)


def for_ranks(environ: Mapping[str, str], named: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """The ranks' environment from the driver's ``environ``: its allowed variables, then ``named`` (whole).

    Args:
        environ: the driver's environment (``os.environ``).
        named: variables the caller names for the ranks, which go whatever their names.

    Returns:
        A new dict; ``environ`` is not changed.
    """
    kept = {k: v for k, v in environ.items() if allowed(k)}
    kept.update(named or {})
    return kept


def for_store(protocol: str, environ: Mapping[str, str]) -> Dict[str, str]:
    """The variables of ``environ`` a store of ``protocol`` (``s3``, ``gs``, ``file``...) reads its credentials
    from, for the ranks of a fit on it; none for a protocol without any."""
    prefixes = STORE_PREFIXES.get(protocol.lower(), ())
    return {k: v for k, v in environ.items() if prefixes and k.startswith(prefixes)}
