"""hvdkeras.build_horovod.patches: the patch files, their selection and digest, applied to the real source."""
import shutil
import tarfile

import pytest

from hvdkeras.build_horovod import BuildError, builder, patches

ALL = sorted(patches.PATCH_DIR.glob("*.patch"))


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_every_patch_says_what_changed_who_needs_it_and_where_upstream_discusses_it(path):
    header = path.read_text().split("\n--- a/", 1)[0]
    for field in ("Patch:", "Builds:", "Needed by:", "Upstream:"):
        assert f"\n{field}" in "\n" + header, f"{path.name} has no {field} line"


def test_cpu_builds_leave_out_the_gpu_patch_and_gpu_builds_take_all():
    cpu = [p.name for p in patches.select(gpu=False, skip="")]
    gpu = [p.name for p in patches.select(gpu=True, skip="")]
    assert gpu == [p.name for p in ALL]
    assert [p.name for p in patches.select(gpu=True, skip="") if p.builds == "gpu"] == \
        ["0003-tf221-gpu-stream-handle.patch"]
    assert "0003-tf221-gpu-stream-handle.patch" not in cpu and len(cpu) == len(gpu) - 1


def test_skip_leaves_out_the_named_patches(monkeypatch):
    monkeypatch.setenv(patches.SKIP_ENV, "0002")
    assert [p.name[:4] for p in patches.select(gpu=False)] == ["0001", "0004", "0005", "0006", "0007", "0008", "0009",
                                                                     "0010", "0011", "0012"]


def test_extra_patches_join_the_shipped_ones_in_name_order(monkeypatch, tmp_path):
    extra = tmp_path / "0000-x.patch"
    extra.write_text("Patch: x\nBuilds: all\n--- a/f\n+++ b/f\n")
    monkeypatch.setenv(patches.EXTRA_ENV, str(extra))
    assert [p.name[:4] for p in patches.select(gpu=False, skip="0002")] == \
        ["0000", "0001", "0004", "0005", "0006", "0007", "0008", "0009", "0010", "0011", "0012"]
    monkeypatch.setenv(patches.EXTRA_ENV, str(tmp_path / "nope.patch"))
    with pytest.raises(BuildError, match=r"HVDKERAS_HOROVOD_EXTRA_PATCHES names a patch file that does not exist. "
                                         r"Received: .*nope\.patch"):
        patches.select(gpu=False)


def test_digest_changes_when_a_patch_changes(tmp_path):
    for p in ALL:
        shutil.copy(p, tmp_path)
    before = patches.digest(patches.select(gpu=True, patch_dir=tmp_path, skip=""))
    target = tmp_path / ALL[0].name
    target.write_text(target.read_text() + "\n")
    assert patches.digest(patches.select(gpu=True, patch_dir=tmp_path, skip="")) != before


def test_a_file_without_a_builds_line_is_refused(tmp_path):
    (tmp_path / "0009-x.patch").write_text("Patch: x\n--- a/f\n+++ b/f\n")
    with pytest.raises(BuildError, match="no 'Builds: all' or 'Builds: gpu' line"):
        patches.select(gpu=False, patch_dir=tmp_path, skip="")


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """Horovod 0.28.1's registry source, unpacked (from the install's cache; downloaded if missing)."""
    sdist = builder.fetch_sdist(builder.cache_root())
    work = tmp_path_factory.mktemp("src")
    with tarfile.open(sdist) as tar:
        tar.extractall(work, filter="data")
    return work / "horovod-0.28.1"


def test_every_patch_applies_to_the_registry_source_and_keeps_the_old_path_for_old_tensorflow(source, tmp_path):
    tree = tmp_path / "h"
    shutil.copytree(source, tree)
    patches.apply(patches.select(gpu=True, skip=""), tree)
    xla = (tree / "horovod/tensorflow/xla_mpi_ops.cc").read_text()
    assert '#include "tensorflow/compiler/xla/hlo/builder/xla_builder.h"' in xla
    assert '#include "tensorflow/compiler/xla/client/xla_builder.h"' in xla  # TF < 2.19
    assert "::xla::StatusOr<::xla::XlaOp>" not in xla.split("#endif // TENSORFLOW_VERSION >= 2019000000")[-1]
    mpi_ops = (tree / "horovod/tensorflow/mpi_ops.cc").read_text()
    assert mpi_ops.count("stream_executor::gpu::AsGpuStreamValue(stream)") == 1  # only in the TF < 2.21 branch
    assert "#include <stdexcept>" in (tree / "horovod/common/common.h").read_text()


def test_a_patch_that_does_not_apply_names_itself(source, tmp_path):
    tree = tmp_path / "h"
    shutil.copytree(source, tree)
    cpu = patches.select(gpu=False, skip="")
    patches.apply(cpu, tree)
    with pytest.raises(BuildError, match=r"patch 0001-gcc-missing-standard-includes.patch does not apply"):
        patches.apply(cpu[:1], tree)  # already applied


def test_installed_horovod_asks_how_it_was_built_once_per_build(monkeypatch, tmp_path):
    """Patch 0005: horovodrun's "built with Gloo/MPI?" answers are kept beside the libraries, by their key."""
    from horovod.common import util

    real_file = util._build_checks_file
    asked = []

    def ask(ext, fn, desc, verbose):
        asked.append(desc)
        return True

    key = [["mpi_lib.so", 1, 1]]
    monkeypatch.setattr(util, "_check_extension_in_new_process", ask)
    monkeypatch.setattr(util, "_build_checks_file", lambda ext: (str(tmp_path / ".build_checks.json"), key))
    assert util._check_extension_lambda("tensorflow", None, "built with Gloo", False) is True
    assert util._check_extension_lambda("tensorflow", None, "built with Gloo", False) is True
    assert util._check_extension_lambda("tensorflow", None, "built with MPI", False) is True
    assert asked == ["built with Gloo", "built with MPI"]  # the second Gloo question was answered from the file
    util._check_extension_lambda("tensorflow", None, "running with GPU", False)
    util._check_extension_lambda("tensorflow", None, "running with GPU", False)
    assert asked[2:] == ["running with GPU"] * 2  # depends on the machine, never kept
    key[0][2] = 2  # a rebuilt library: asked again
    util._check_extension_lambda("tensorflow", None, "built with Gloo", False)
    assert asked[-1] == "built with Gloo" and len(asked) == 5
    path, real_key = real_file("tensorflow")  # the real place: beside horovod/tensorflow's library
    assert real_key and real_key[0][0].startswith("mpi_lib") and path.endswith("tensorflow/.build_checks.json")


def test_leaving_out_the_authenticated_rendezvous_is_refused_unless_accepted_and_then_said(monkeypatch):
    monkeypatch.delenv(patches.OPEN_ENV, raising=False)
    with pytest.raises(BuildError, match=r"^HVDKERAS_HOROVOD_SKIP_PATCHES=0010 leaves out 0010-rendezvous-answers-only"
                                         r"-the-job.patch, without which every Gloo rendezvous answers anyone .*; set"
                                         r" HVDKERAS_ALLOW_OPEN_RENDEZVOUS=1 too"):
        patches.select(gpu=False, skip="0010")
    assert not patches.open_rendezvous(patches.select(gpu=False, skip=""))
    monkeypatch.setenv(patches.OPEN_ENV, "1")
    assert patches.open_rendezvous(patches.select(gpu=False, skip="0010"))
