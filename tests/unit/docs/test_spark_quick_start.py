"""docs/spark.md opens with its quick start, and what it shows is the example's code, line for line.

tests/distributed/test_spark.py::test_the_quick_start_fits_transforms_saves_and_loads runs the example's
``quick_start`` on a real Spark; this checks that the page shows that code and the command that runs it.
"""
import os
import re

from tests.unit.helpers import REPO

EXAMPLE = os.path.join("examples", "spark", "keras_spark_digits.py")


def _section(text, heading):
    return text.split(heading, 1)[1].split("\n## ", 1)[0]


def test_docs_spark_md_opens_with_the_quick_start():
    text = open(os.path.join(REPO, "docs", "spark.md")).read()
    headings = re.findall(r"^## (.+)$", text, re.M)
    assert headings[0] == "Quick start", headings
    quick = _section(text, "## Quick start")
    assert f"python {EXAMPLE}" in quick
    assert "test_spark.py::test_the_quick_start_fits_transforms_saves_and_loads" in quick


def test_the_quick_starts_code_is_the_examples_line_for_line():
    quick = _section(open(os.path.join(REPO, "docs", "spark.md")).read(), "## Quick start")
    (code,) = re.findall(r"```python\n(.*?)```", quick, re.S)
    source = open(os.path.join(REPO, EXAMPLE)).read().splitlines()
    at = 0
    for line in code.splitlines():
        if line.strip() in ("", "..."):
            continue
        assert line in source[at:], f"docs/spark.md's quick start shows a line {EXAMPLE} does not have here: {line!r}"
        at = source.index(line, at) + 1
