"""hvdkeras.build_horovod.builder checks before it runs or installs: the sdist's digest, the cached wheel's.

A tampered sdist served by the package index is refused before pip prepares it (its setup code would create a
marker file); a cached wheel whose bytes differ from those recorded when it was built is refused before pip
installs it; a cache other users can write to is refused.
"""
import json
import os
import subprocess
import tarfile

import pytest

from hvdkeras.build_horovod import BuildError, builder
from hvdkeras.build_horovod.build_plan import HOROVOD_VERSION

SETUP = """import pathlib
pathlib.Path({marker!r}).write_text("the sdist's code ran")
from setuptools import setup
setup(name="horovod", version="{version}")
"""


def test_a_tampered_sdist_is_refused_before_any_of_its_code_runs(tmp_path, monkeypatch):
    source = tmp_path / "src" / f"horovod-{HOROVOD_VERSION}"
    source.mkdir(parents=True)
    marker = tmp_path / "MARKER"
    (source / "setup.py").write_text(SETUP.format(marker=str(marker), version=HOROVOD_VERSION))
    (source / "PKG-INFO").write_text(f"Metadata-Version: 2.1\nName: horovod\nVersion: {HOROVOD_VERSION}\n")
    links = tmp_path / "index"
    links.mkdir()
    with tarfile.open(links / f"horovod-{HOROVOD_VERSION}.tar.gz", "w:gz") as tar:
        tar.add(source, arcname=source.name)
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # the "index" is the folder of the tampered sdist
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    with pytest.raises(BuildError) as info:
        builder.fetch_sdist(tmp_path / "cache")
    message = str(info.value)
    assert "is not the registry's (sha256 " in message and "refused before any of it ran" in message, message
    assert "\n" not in message
    assert not marker.exists()  # pip compared the digest before preparing the sdist
    assert not (tmp_path / "cache" / "sdist" / f"horovod-{HOROVOD_VERSION}.tar.gz").exists()


def _cached(tmp_path, content=b"a wheel's bytes"):
    folder = tmp_path / "horovod-0.28.1-build"
    folder.mkdir()
    wheel = folder / f"horovod-{HOROVOD_VERSION}-cp311-cp311-linux_x86_64.whl"
    wheel.write_bytes(content)
    (folder / "build.json").write_text(json.dumps({"wheel_sha256": builder._sha256(wheel)}))
    return folder, wheel


def test_a_cached_wheel_with_its_recorded_digest_is_used(tmp_path):
    folder, wheel = _cached(tmp_path)
    assert builder.cached_wheel(folder) == wheel


def test_a_tampered_cached_wheel_is_refused_in_one_line_and_nothing_is_installed(tmp_path, monkeypatch):
    folder, wheel = _cached(tmp_path)
    wheel.write_bytes(b"a planted Horovod")
    ran = []
    monkeypatch.setattr(builder.subprocess, "run", lambda *a, **k: ran.append(a) or subprocess.CompletedProcess(a, 0))
    with pytest.raises(BuildError) as info:
        builder.install(folder)
    message = str(info.value)
    assert message.startswith(f"the cached wheel {wheel} is not the one built there (sha256 ") and "\n" not in message
    assert "nothing installed" in message and ran == []  # no pip, no import check: nothing ran
    with pytest.raises(BuildError, match="is not the one built there"):
        builder.cached_wheel(folder)


def test_a_cached_wheel_without_a_recorded_digest_is_built_again_not_trusted(tmp_path):
    folder, wheel = _cached(tmp_path)
    os.remove(folder / "build.json")
    assert builder.cached_wheel(folder) is None
    with pytest.raises(BuildError, match="holds no wheel with a recorded SHA-256"):
        builder.install(folder)


def test_a_cache_other_users_can_write_to_is_refused(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    os.chmod(cache, 0o777)
    with pytest.raises(BuildError, match=r"can be written by other users \(mode 777\), who could plant a Horovod"):
        builder.check_cache(cache)
    os.chmod(cache, 0o755)
    builder.check_cache(cache)
    builder.check_cache(cache / "not" / "yet")  # judged by the folder it will be made in
