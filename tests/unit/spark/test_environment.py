"""hvdkeras.spark.common.environment: the driver's variables a rank gets, by allow-list; a store's credentials."""
from hvdkeras.spark.common import environment

DRIVER = {"PATH": "/usr/bin", "HOME": "/home/u", "PYTHONPATH": "/p", "HOROVOD_GLOO_TIMEOUT_SECONDS": "30",
          "HVDKERAS_SPARK_GPUS": "0", "TF_CPP_MIN_LOG_LEVEL": "2", "NCCL_DEBUG": "INFO", "OMP_NUM_THREADS": "2",
          "CUDA_HOME": "/cuda", "LD_LIBRARY_PATH": "/cuda/lib", "TMPDIR": "/scratch",
          "AWS_ACCESS_KEY_ID": "AKIA", "AWS_SECRET_ACCESS_KEY": "aws", "GOOGLE_APPLICATION_CREDENTIALS": "/k.json",
          "AZURE_STORAGE_KEY": "az", "GITHUB_TOKEN": "ghp", "DATABASE_URL": "postgres://u:p@h/db",
          "SPARK_LOCAL_IP": "10.0.0.1", "MY_API_KEY": "k"}


def test_only_the_allow_list_reaches_the_ranks_and_named_variables_go_whole():
    ranks = environment.for_ranks(DRIVER, named={"MY_API_KEY": "for the ranks"})
    assert sorted(ranks) == ["CUDA_HOME", "HOME", "HOROVOD_GLOO_TIMEOUT_SECONDS", "HVDKERAS_SPARK_GPUS",
                             "LD_LIBRARY_PATH", "MY_API_KEY", "NCCL_DEBUG", "OMP_NUM_THREADS", "PATH", "PYTHONPATH",
                             "TF_CPP_MIN_LOG_LEVEL", "TMPDIR"]
    assert ranks["MY_API_KEY"] == "for the ranks" and DRIVER["MY_API_KEY"] == "k"  # the driver's is not changed


def test_a_stores_credentials_go_only_to_the_ranks_of_a_fit_on_that_kind_of_store():
    assert environment.for_store("s3", DRIVER) == {"AWS_ACCESS_KEY_ID": "AKIA", "AWS_SECRET_ACCESS_KEY": "aws"}
    assert environment.for_store("gs", DRIVER) == {"GOOGLE_APPLICATION_CREDENTIALS": "/k.json"}
    assert environment.for_store("abfs", DRIVER) == {"AZURE_STORAGE_KEY": "az"}
    assert environment.for_store("file", DRIVER) == {} and environment.for_store("hdfs", DRIVER) == {}
