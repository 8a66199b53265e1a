"""Where a Spark job's data, checkpoints and logs go: Horovod's ``Store``, on any fsspec filesystem.

The layout under the store's prefix is Horovod's (``horovod.spark.common.store``), so a
path a Horovod user knows is where they expect it::

    <prefix>/intermediate_train_data.<idx>   the DataFrame's training rows, Parquet, one file per Spark partition
    <prefix>/intermediate_val_data.<idx>     its validation rows
    <prefix>/runs/<run_id>/checkpoints/      the run's checkpoints (rank 0 publishes them, :mod:`.publish`)
    <prefix>/runs/<run_id>/metrics.jsonl     its metrics, and config.yaml

``Store.create(path)`` takes a local or shared folder (``/mnt/shared/store``, ``file:///...``),
Databricks' DBFS through its FUSE mount (``dbfs:/x`` is the folder ``/dbfs/x``, as Horovod's
``DBFSLocalStore`` maps it), or an fsspec URL: ``s3://`` (s3fs), ``gs://`` (gcsfs), ``abfs://``
(adlfs), ``hdfs://`` (pyarrow's ``HadoopFileSystem``, which needs Hadoop's libhdfs and a JVM).
A missing client is one line naming the package to install. ``storage_options`` (credentials,
``endpoint_url``) go to fsspec; without them each filesystem takes its defaults (for S3 the
``AWS_*`` variables). They travel to the ranks inside the pickled store and are never written
to the store, a log or a saved model (``repr`` shows the prefix only).
"""
from __future__ import annotations

import os
from typing import Any, Dict, Optional, Union

from hvdkeras.common.errors import ConfigError

# fsspec's protocols whose filesystem lives in another package: the package to pip install.
CLIENTS = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "abfs": "adlfs", "abfss": "adlfs",
           "az": "adlfs", "hdfs": "pyarrow", "viewfs": "pyarrow"}
DBFS_MOUNT = "/dbfs"  # where Databricks mounts DBFS on the driver and every executor


def dbfs_local(path: str) -> str:
    """A DBFS path as the folder of its FUSE mount: ``dbfs:/x`` and ``dbfs:///x`` are ``/dbfs/x``; others unchanged."""
    if not path.startswith("dbfs:"):
        return path
    return DBFS_MOUNT + "/" + path[len("dbfs:"):].lstrip("/")


class Store:
    """Where a job's intermediate data, checkpoints and logs live (Horovod's ``Store`` API)."""

    @staticmethod
    def create(prefix_path: str, *args: Any, **kwargs: Any) -> "FilesystemStore":
        """The store for ``prefix_path``: a local or shared folder, a DBFS path, or an fsspec URL.

        Args:
            prefix_path: the store's root.
            *args: :class:`FilesystemStore`'s other arguments.
            **kwargs: :class:`FilesystemStore`'s other arguments (``storage_options=`` for fsspec).

        Raises:
            ConfigError: the filesystem's package is missing, or it cannot be opened here (one line).
        """
        return FilesystemStore(dbfs_local(prefix_path), *args, **kwargs)


class FilesystemStore(Store):
    """A store on an fsspec filesystem (a local or shared folder by default).

    Args:
        prefix_path: the store's root: a path or an fsspec URL.
        train_path: where the training rows go (default: ``<prefix>/intermediate_train_data``).
        val_path: where the validation rows go (default: ``<prefix>/intermediate_val_data``).
        test_path: where the test rows go (default: ``<prefix>/intermediate_test_data``).
        runs_path: where the runs go (default: ``<prefix>/runs``).
        save_runs: keep each run's checkpoints and logs in the store.
        storage_options: passed to fsspec for the filesystem (credentials, endpoints).
    """

    def __init__(self, prefix_path: str, train_path: Optional[str] = None, val_path: Optional[str] = None,
                 test_path: Optional[str] = None, runs_path: Optional[str] = None, save_runs: bool = True,
                 storage_options: Optional[Dict[str, Any]] = None):
        import fsspec

        self.storage_options = dict(storage_options or {})
        self.prefix_path = self._full(prefix_path)
        protocol = self.prefix_path.split("://", 1)[0]
        try:
            self.fs, _ = fsspec.core.url_to_fs(self.prefix_path, **self.storage_options)
        except ImportError:
            package = CLIENTS.get(protocol, f"the fsspec filesystem of {protocol}://")
            raise ConfigError(f"the store {prefix_path!r} needs {package}, which is not installed here: pip install"
                              f" {package} (on the driver and every executor)") from None
        except ValueError as exc:
            raise ConfigError(f"the store {prefix_path!r} is not on a filesystem fsspec can open here: {_first(exc)}"
                              ) from None
        except OSError as exc:
            if protocol in ("hdfs", "viewfs"):
                raise ConfigError(f"the store {prefix_path!r} is on HDFS, which pyarrow reaches through Hadoop's"
                                  f" libhdfs and a JVM ({_first(exc)}): set JAVA_HOME, HADOOP_HOME (or"
                                  " ARROW_LIBHDFS_DIR) and CLASSPATH=$(hadoop classpath --glob) on the driver and"
                                  " every executor") from None
            raise ConfigError(f"the store {prefix_path!r} cannot be opened here: {_first(exc)}") from None
        self._train_path = self._full(train_path) if train_path else self._join("intermediate_train_data")
        self._val_path = self._full(val_path) if val_path else self._join("intermediate_val_data")
        self._test_path = self._full(test_path) if test_path else self._join("intermediate_test_data")
        self._runs_path = self._full(runs_path) if runs_path else self._join("runs")
        self._save_runs = save_runs

    def fs_protocol(self) -> str:
        """The protocol of the store's URL (``file``, ``s3``, ``gs``...): which credentials its ranks need."""
        return self.prefix_path.split("://", 1)[0]

    def __repr__(self) -> str:  # the prefix only: storage_options may hold credentials
        return f"{type(self).__name__}({self.prefix_path!r})"

    @staticmethod
    def _full(path: str) -> str:
        return path if "://" in path else "file://" + os.path.abspath(path)

    def _join(self, *parts: str) -> str:
        return "/".join([self.prefix_path.rstrip("/"), *parts])

    @staticmethod
    def _indexed(path: str, idx: Union[None, int, str]) -> str:
        return path if idx is None else f"{path}.{idx}"

    # ------------------------------------------------------------------ Horovod's names

    def get_train_data_path(self, idx: Union[None, int, str] = None) -> str:
        """The training rows' Parquet folder (of dataset ``idx``)."""
        return self._indexed(self._train_path, idx)

    def get_val_data_path(self, idx: Union[None, int, str] = None) -> str:
        """The validation rows' Parquet folder (of dataset ``idx``)."""
        return self._indexed(self._val_path, idx)

    def get_test_data_path(self, idx: Union[None, int, str] = None) -> str:
        """The test rows' Parquet folder (of dataset ``idx``)."""
        return self._indexed(self._test_path, idx)

    def saving_runs(self) -> bool:
        """Whether runs keep their checkpoints and logs in the store."""
        return self._save_runs

    def get_runs_path(self) -> str:
        """The folder holding every run."""
        return self._runs_path

    def get_run_path(self, run_id: str) -> str:
        """Run ``run_id``'s folder."""
        return f"{self._runs_path.rstrip('/')}/{run_id}"

    def get_checkpoint_path(self, run_id: str) -> Optional[str]:
        """Run ``run_id``'s checkpoint folder; ``None`` when runs are not saved."""
        return f"{self.get_run_path(run_id)}/checkpoints" if self._save_runs else None

    def get_logs_path(self, run_id: str) -> Optional[str]:
        """Run ``run_id``'s logs folder; ``None`` when runs are not saved."""
        return f"{self.get_run_path(run_id)}/logs" if self._save_runs else None

    def get_localized_path(self, path: str) -> str:
        """``path`` as the filesystem names it (without its protocol)."""
        return str(self.fs._strip_protocol(path))

    def is_local(self) -> bool:
        """Whether the store is on this machine's (or a shared, mounted) filesystem, which ranks open directly."""
        return self.prefix_path.startswith("file://")

    def exists(self, path: str) -> bool:
        """Whether ``path`` exists in the store."""
        return bool(self.fs.exists(self.get_localized_path(path)))

    def read(self, path: str) -> bytes:
        """The bytes of the file at ``path``."""
        with self.fs.open(self.get_localized_path(path), "rb") as f:
            return bytes(f.read())

    def write_text(self, path: str, text: str) -> None:
        """Writes ``text`` to ``path`` whole: to a temporary name first, then renamed into place."""
        where = self.get_localized_path(path)
        parent = where.rsplit("/", 1)[0]
        self.fs.makedirs(parent, exist_ok=True)
        tmp = f"{where}.tmp-{os.getpid()}"
        with self.fs.open(tmp, "w") as f:
            f.write(text)
        self.fs.mv(tmp, where)

    def create_exclusive(self, path: str, text: str) -> None:
        """Creates ``path`` holding ``text`` in one atomic step that fails when it exists: ``O_EXCL`` on a folder,
        a conditional write (S3's ``If-None-Match: *``) on an object store, through fsspec's ``"xb"`` mode.

        Raises:
            FileExistsError: ``path`` exists (another writer created it first).
            ExclusiveCreateError: the store's filesystem has none (HDFS through Arrow, for one).
        """
        where = self.get_localized_path(path)
        self.fs.makedirs(where.rsplit("/", 1)[0], exist_ok=True)
        try:
            with self.fs.open(where, "xb") as f:
                f.write(text.encode())
        except FileExistsError:
            raise
        except (ValueError, NotImplementedError) as exc:
            raise ExclusiveCreateError(_first(exc)) from None
        except OSError as exc:  # S3's 412 Precondition Failed arrives as an OSError of its own kind
            if "Precondition" in str(exc) or "412" in str(exc):
                raise FileExistsError(path) from None
            raise
        self.fs.invalidate_cache(where.rsplit("/", 1)[0])

    def is_parquet_dataset(self, path: str) -> bool:
        """Whether ``path`` holds a Parquet dataset (a folder with ``.parquet`` files)."""
        where = self.get_localized_path(path)
        if not self.fs.isdir(where):
            return False
        return any(str(name).endswith(".parquet") for name in self.fs.ls(where, detail=False))


class ExclusiveCreateError(Exception):
    """The store's filesystem cannot create a file in one step that fails when it exists."""


def _first(exc: BaseException) -> str:
    """An exception's first line, at most 200 characters (its type when it says nothing)."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


class LocalStore(FilesystemStore):
    """A store in a local or shared folder (Horovod's name for :class:`FilesystemStore` on ``file://``)."""
