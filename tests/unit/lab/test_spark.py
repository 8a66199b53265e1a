"""The Spark test cluster's pure parts (lab/spark.py): the driver's defaults, where environments unpack, and how
down() finds the JVMs."""
import os

from lab import spark


def test_the_drivers_defaults_name_the_cluster_and_keep_everything_in_the_folder(tmp_path):
    folder = str(tmp_path / spark.FOLDER)
    conf = spark.driver_conf("spark://198.18.213.1:17077", "198.18.213.1", "/venv/bin/python", folder, 2)
    assert conf["spark.master"] == "spark://198.18.213.1:17077"
    assert conf["spark.driver.host"] == conf["spark.driver.bindAddress"] == "198.18.213.1"  # executors reach it
    assert conf["spark.pyspark.python"] == "/venv/bin/python"  # the executors' Python has Horovod
    assert conf["spark.cores.max"] == "2"
    for key in ("spark.sql.warehouse.dir", "spark.local.dir"):
        assert conf[key].startswith(folder + os.sep), key
    assert conf["spark.ui.enabled"] == "false"
    assert (spark.MASTER_PORT, spark.MASTER_UI_PORT, spark.WORKER_UI_PORT) != (7077, 8080, 8081)  # not a real Spark's
    assert spark._properties({"a.b": "1", "c": "x y"}) == "a.b 1\nc x y\n"


def test_down_finds_only_jvms_that_name_a_cluster_folder(monkeypatch):
    class Proc:
        def __init__(self, pid, cmdline):
            self.info = {"pid": pid, "cmdline": cmdline}

    import psutil

    procs = [Proc(1, ["/usr/lib/jvm/bin/java", "-cp", f"/tmp/x/{spark.FOLDER}/daemon-conf/:/jars/*",
                      "org.apache.spark.deploy.master.Master"]),
             Proc(2, ["/usr/lib/jvm/bin/java", "-cp", "/opt/spark/conf/:/opt/spark/jars/*",
                      "org.apache.spark.deploy.master.Master"]),  # a real cluster's: left alone
             Proc(3, ["python", f"/tmp/x/{spark.FOLDER}/job.py"]),
             Proc(4, None)]
    monkeypatch.setattr(psutil, "process_iter", lambda attrs=None: iter(procs))
    assert spark._daemon_pids() == [1]


def test_shipped_environments_are_unpacked_in_memory_only_where_the_machine_has_room_for_them():
    assert spark.in_memory(spark.DRIVER_IN_MEMORY_ROOM - 1) == (False, False)
    assert spark.in_memory(spark.DRIVER_IN_MEMORY_ROOM) == (True, False)  # the driver's 2.1 GB first
    assert spark.in_memory(spark.WORKERS_IN_MEMORY_ROOM) == (True, True)
    assert spark.IN_MEMORY == "/dev/shm" and spark.IN_MEMORY_PREFIX == f"{spark.FOLDER}-"  # up()'s own mkdtemp there


def test_down_without_info_removes_only_this_users_real_in_memory_folders(tmp_path, monkeypatch):
    monkeypatch.setattr(spark, "IN_MEMORY", str(tmp_path))
    mine = tmp_path / f"{spark.IN_MEMORY_PREFIX}abc"
    mine.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / f"{spark.IN_MEMORY_PREFIX}link").symlink_to(tmp_path / "elsewhere")  # planted: never followed
    (tmp_path / "hvdtest-other").mkdir()
    assert spark._memory_dirs() == [str(mine)]
