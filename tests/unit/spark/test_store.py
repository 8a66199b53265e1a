"""hvdkeras.spark.common.store: Horovod's store layout and names, on a local folder, DBFS and fsspec URLs."""
import importlib
import pickle

import pytest

from hvdkeras.common.errors import ConfigError
from hvdkeras.spark.common.store import FilesystemStore, LocalStore, Store, dbfs_local


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


def test_a_protocol_fsspec_does_not_know_is_one_line():
    with pytest.raises(ConfigError) as error:
        Store.create("nosuchfs://bucket/store")
    assert str(error.value) == ("the store 'nosuchfs://bucket/store' is not on a filesystem fsspec can open here:"
                                " Protocol not known: nosuchfs")


@pytest.mark.parametrize("url, package, module, cls", [
    ("gs://bucket/store", "gcsfs", "gcsfs", "GCSFileSystem"),
    ("abfs://container/store", "adlfs", "adlfs", "AzureBlobFileSystem"),
])
def test_a_cloud_store_is_its_fsspec_filesystem_or_one_line_naming_the_package(url, package, module, cls):
    try:
        importlib.import_module(module)
    except ImportError:
        with pytest.raises(ConfigError) as error:
            Store.create(url)
        assert str(error.value) == (f"the store {url!r} needs {package}, which is not installed here: pip install"
                                    f" {package} (on the driver and every executor)")
        return
    assert type(Store.create(url).fs).__name__ == cls  # pragma: no cover  (not installed on the pinned stacks)


def test_an_hdfs_store_is_pyarrows_hadoop_filesystem_or_one_line_naming_what_it_needs():
    try:
        store = Store.create("hdfs://namenode:8020/store")
    except ConfigError as error:  # no libhdfs or JVM where pyarrow looks (this machine)
        line = str(error)
        assert line.startswith("the store 'hdfs://namenode:8020/store' is on HDFS, which pyarrow reaches through"
                               " Hadoop's libhdfs and a JVM (")
        assert line.endswith("set JAVA_HOME, HADOOP_HOME (or ARROW_LIBHDFS_DIR) and CLASSPATH=$(hadoop classpath"
                             " --glob) on the driver and every executor")
        assert "\n" not in line
        return
    assert type(store.fs).__name__ == "HadoopFileSystem"  # pragma: no cover  (a Hadoop client is installed)


@pytest.mark.parametrize("url, folder", [
    ("dbfs:/ml/store", "/dbfs/ml/store"),
    ("dbfs:///ml/store", "/dbfs/ml/store"),
    ("/dbfs/ml/store", "/dbfs/ml/store"),
    ("file:///dbfs/ml/store", "/dbfs/ml/store"),
])
def test_dbfs_is_its_fuse_mount_a_local_folder_as_horovods_dbfs_store_maps_it(url, folder):
    assert dbfs_local("dbfs:/x/y") == "/dbfs/x/y"
    store = Store.create(url)
    assert store.is_local() and store.prefix_path == f"file://{folder}"
    assert store.get_localized_path(store.get_run_path("r1")) == f"{folder}/runs/r1"


def test_an_s3_store_is_s3fs_with_the_storage_options_and_no_secret_in_its_repr():
    pytest.importorskip("s3fs")
    secret = "S3CR3T-never-in-a-file"
    store = Store.create("s3://bucket/store", storage_options={
        "key": "AKIAEXAMPLE", "secret": secret, "client_kwargs": {"endpoint_url": "http://127.0.0.1:9"}})
    assert type(store.fs).__name__ == "S3FileSystem" and not store.is_local()
    assert store.fs.key == "AKIAEXAMPLE" and store.fs.client_kwargs == {"endpoint_url": "http://127.0.0.1:9"}
    assert store.get_run_path("r1") == "s3://bucket/store/runs/r1"
    assert store.get_localized_path(store.get_run_path("r1")) == "bucket/store/runs/r1"
    assert repr(store) == "FilesystemStore('s3://bucket/store')" and secret not in str(store)
    copy = pickle.loads(pickle.dumps(store))  # how the store travels to the ranks: with its options
    assert copy.fs.secret == secret and copy.get_run_path("r1") == store.get_run_path("r1")
