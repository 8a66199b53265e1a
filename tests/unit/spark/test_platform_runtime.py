"""A venv built as a managed Spark platform's is (stack keras2: stacks/keras2/runtime.txt): the runtime's pyspark
and what came with it were installed first, then hvdkeras's wheel as docs/spark-cluster.md tells platform users,
and nothing of the runtime changed. That venv's Spark tests (fit, transform, save and load on local[2], Horovod's
Spark MNIST example switched by its imports) run on what the runtime had."""
import importlib.metadata
import json
import os
import sys

import pytest

from tests.unit.helpers import REPO


def stack():
    with open(os.path.join(sys.prefix, ".hvdkeras-stack")) as f:
        return f.read().strip()


def test_the_platforms_runtime_is_unchanged_by_installing_hvdkeras():
    if not os.path.exists(os.path.join(sys.prefix, ".hvdkeras-stack")):
        pytest.skip("not a venv made by tools/install_stack.sh")
    if not os.path.exists(os.path.join(REPO, "stacks", stack(), "runtime.txt")):
        pytest.skip(f"stack {stack()} is not built as a platform's runtime")
    with open(os.path.join(sys.prefix, "hvdkeras-runtime.json")) as f:
        record = json.load(f)
    assert record["runtime"]["pyspark"].startswith("3.5."), record  # the Spark of the managed platforms
    now = {name: importlib.metadata.version(name) for name in record["runtime"]}
    assert now == record["runtime"]
    # pip installed hvdkeras alone: every requirement was already met by the runtime, nothing replaced
    assert [line.split("==")[0] for line in record["installed_with_hvdkeras"]] == ["hvdkeras"], record
