"""hvdkeras.spark.common.store: Horovod's store layout and names, on a local folder and an fsspec URL."""
import pytest

from hvdkeras.common.errors import ConfigError
from hvdkeras.spark.common.store import FilesystemStore, LocalStore, Store


def test_the_layout_is_horovods(tmp_path):
    store = Store.create(str(tmp_path / "store"))
    root = f"file://{tmp_path}/store"
    assert isinstance(store, FilesystemStore) and store.is_local()
    assert store.get_train_data_path() == f"{root}/intermediate_train_data"
    assert store.get_train_data_path(3) == f"{root}/intermediate_train_data.3"
    assert store.get_val_data_path(3) == f"{root}/intermediate_val_data.3"
    assert store.get_test_data_path() == f"{root}/intermediate_test_data"
    assert store.get_run_path("r1") == f"{root}/runs/r1"
    assert store.get_checkpoint_path("r1") == f"{root}/runs/r1/checkpoints"
    assert store.get_logs_path("r1") == f"{root}/runs/r1/logs"
    assert store.get_localized_path(store.get_run_path("r1")) == f"{tmp_path}/store/runs/r1"
    assert FilesystemStore(str(tmp_path), save_runs=False).get_checkpoint_path("r1") is None


def test_a_file_url_and_a_path_are_the_same_store(tmp_path):
    by_url = Store.create(f"file://{tmp_path}")
    by_path = LocalStore(str(tmp_path))
    assert by_url.get_run_path("x") == by_path.get_run_path("x")


def test_written_text_is_read_back_whole_and_parquet_folders_are_told_apart(tmp_path):
    store = Store.create(str(tmp_path))
    path = store.get_run_path("r1") + "/metadata"
    assert not store.exists(path)
    store.write_text(path, '{"uid": "KerasModel_1"}')
    assert store.exists(path) and store.read(path) == b'{"uid": "KerasModel_1"}'
    assert sorted(p.name for p in (tmp_path / "runs" / "r1").iterdir()) == ["metadata"]  # no temporary left
    data = tmp_path / "intermediate_train_data.0"
    assert not store.is_parquet_dataset(store.get_train_data_path(0))
    data.mkdir()
    (data / "part-00000.parquet").write_bytes(b"PAR1")
    assert store.is_parquet_dataset(store.get_train_data_path(0))


@pytest.mark.parametrize("url, message", [
    ("hdfs://namenode/store", "HDFS stores need a client hvdkeras does not install"),
    ("dbfs:/store", "DBFS stores need a client hvdkeras does not install"),
    ("nosuchfs://bucket/store", "is not on a filesystem fsspec can open here"),
])
def test_a_store_that_cannot_be_opened_here_is_one_line(url, message):
    with pytest.raises(ConfigError, match=message):
        Store.create(url)
