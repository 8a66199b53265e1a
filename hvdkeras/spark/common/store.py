"""Where a Spark job's data, checkpoints and logs go: Horovod's ``Store``, on any fsspec filesystem.

The layout under the store's prefix is Horovod's (``horovod.spark.common.store``), so a
path a Horovod user knows is where they expect it::

    <prefix>/intermediate_train_data.<idx>   the DataFrame's training rows, Parquet, written once by Spark
    <prefix>/intermediate_val_data.<idx>     its validation rows
    <prefix>/runs/<run_id>/checkpoints/      the run's checkpoints (rank 0 writes, every rank resumes)
    <prefix>/runs/<run_id>/logs/             its metrics and TensorBoard logs

``Store.create(path)`` takes a local or shared path (``/mnt/shared/store``) or an fsspec
URL (``file:///...``, ``s3://...`` with that filesystem's package installed). HDFS and
DBFS need clients this project does not install: they are refused in one line.
"""
from __future__ import annotations

import os
from typing import Any, Dict, Optional, Union

from hvdkeras.common.errors import ConfigError

_UNSUPPORTED = {"hdfs": "HDFS", "viewfs": "HDFS", "dbfs": "DBFS"}


class Store:
    """Where a job's intermediate data, checkpoints and logs live (Horovod's ``Store`` API)."""

    @staticmethod
    def create(prefix_path: str, *args: Any, **kwargs: Any) -> "FilesystemStore":
        """The store for ``prefix_path``: a local or shared folder, or an fsspec URL.

        Raises:
            ConfigError: HDFS or DBFS (no client here), or a protocol fsspec does not know.
        """
        protocol = prefix_path.split(":", 1)[0] if "://" in prefix_path or prefix_path.startswith("dbfs:") else "file"
        if protocol in _UNSUPPORTED:
            raise ConfigError(f"{_UNSUPPORTED[protocol]} stores need a client hvdkeras does not install; put the store"
                              f" on a shared filesystem or an fsspec URL instead. Received: {prefix_path!r}")
        return FilesystemStore(prefix_path, *args, **kwargs)


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
        try:
            self.fs, _ = fsspec.core.url_to_fs(self.prefix_path, **self.storage_options)
        except (ImportError, ValueError) as exc:
            raise ConfigError(f"the store {prefix_path!r} is not on a filesystem fsspec can open here: {exc}") from None
        self._train_path = self._full(train_path) if train_path else self._join("intermediate_train_data")
        self._val_path = self._full(val_path) if val_path else self._join("intermediate_val_data")
        self._test_path = self._full(test_path) if test_path else self._join("intermediate_test_data")
        self._runs_path = self._full(runs_path) if runs_path else self._join("runs")
        self._save_runs = save_runs

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

    def is_parquet_dataset(self, path: str) -> bool:
        """Whether ``path`` holds a Parquet dataset (a folder with ``.parquet`` files)."""
        where = self.get_localized_path(path)
        if not self.fs.isdir(where):
            return False
        return any(str(name).endswith(".parquet") for name in self.fs.ls(where, detail=False))


class LocalStore(FilesystemStore):
    """A store in a local or shared folder (Horovod's name for :class:`FilesystemStore` on ``file://``)."""
