"""The image recipe (``Containerfile``), parsed, not built (no base image can be pulled here): its build arguments,
a non-root user with the MPI launchers' UID, Horovod built and checked by ``python -m hvdkeras.build_horovod``,
Open MPI and sshd, and every file it copies present in the repository."""
import os
import re

import pytest

from tests.harness.ranks import REPO

dockerfile_parse = pytest.importorskip("dockerfile_parse", reason="the linter's parser (dockerfile-parse) is missing")

PATH = os.path.join(REPO, "Containerfile")


@pytest.fixture(scope="module")
def recipe():
    parser = dockerfile_parse.DockerfileParser(fileobj=open(PATH, "rb"))  # a path would be taken as a folder
    return parser, parser.structure


def instructions(structure, name):
    return [i["value"] for i in structure if i["instruction"] == name]


def test_it_parses_with_known_instructions_only_and_one_stage_from_a_base_image_argument(recipe):
    parser, structure = recipe
    known = {"ARG", "FROM", "ENV", "RUN", "COPY", "USER", "WORKDIR", "EXPOSE", "CMD", "COMMENT"}
    assert structure and {i["instruction"] for i in structure} <= known
    assert instructions(structure, "FROM") == ["${BASE_IMAGE}"]
    assert parser.baseimage == "python:3.12-slim-bookworm"  # the default, which the stack's Python matches
    assert not any(i["instruction"] == "ADD" for i in structure)  # nothing fetched at build time but packages


def test_its_build_arguments_are_the_documented_ones(recipe):
    _, structure = recipe
    names = {v.split("=", 1)[0] for v in instructions(structure, "ARG")}
    assert names == {"BASE_IMAGE", "STACK", "PYTHON_VERSION", "GPU", "TENSORFLOW_VERSION"}
    docs = open(os.path.join(REPO, "docs", "launching.md")).read()
    for name in names:
        assert f"`{name}" in docs, f"docs/launching.md does not name the build argument {name}"
    keras3_python = open(os.path.join(REPO, "stacks", "keras3", "python")).read().strip()
    assert f"PYTHON_VERSION={keras3_python}" in instructions(structure, "ARG")  # the default stack's Python


def test_it_runs_as_the_mpi_launchers_non_root_user_with_sshd_on_2222(recipe):
    _, structure = recipe
    users = instructions(structure, "USER")
    assert users and users[-1] in ("1000", "mpiuser")
    assert instructions(structure, "EXPOSE") == ["2222"]
    run = " ".join(instructions(structure, "RUN"))
    assert "useradd --create-home --uid 1000" in run and "Port 2222" in run and "PidFile /tmp/sshd.pid" in run
    for package in ("openmpi-bin", "libopenmpi-dev", "openssh-server", "g++"):
        assert re.search(rf"(?<![\w-]){re.escape(package)}(?![\w-])", run), package
    assert "rm -rf /var/lib/apt/lists/*" in run


def test_horovod_is_built_and_checked_by_hvdkeras_against_the_pinned_stack(recipe):
    _, structure = recipe
    run = " ".join(instructions(structure, "RUN"))
    assert 'pip install -c "stacks/${STACK}/constraints.txt" -r "stacks/${STACK}/requirements.txt"' in run
    assert "python -m hvdkeras.build_horovod --mpi yes" in run and "--no-smoke" not in run
    assert "tensorflow[and-cuda]" in run and "--gpu" in run


def test_every_file_it_copies_is_in_the_repository(recipe):
    _, structure = recipe
    for value in instructions(structure, "COPY"):
        sources = [w for w in value.split() if not w.startswith("--")][:-1]
        for source in sources:
            assert os.path.exists(os.path.join(REPO, source)), source
