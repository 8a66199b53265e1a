"""benchmarks.figures: the plots docs/performance.md embeds exist, each draws from docs/records/figures.json, and
the data file's numbers are the records' own (copied, not computed)."""
import os
import re
import struct

import pytest

from benchmarks import efficiency, figures
from tests.unit.helpers import REPO

PERFORMANCE = os.path.join(REPO, "docs", "performance.md")
RECORD = os.path.join(REPO, "docs", "records", "performance-details.md")
DATA = figures.load()


def _png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", head[16:24])


def _embedded():
    return re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", open(PERFORMANCE).read())


def test_performance_embeds_the_four_plots_and_each_exists_and_is_small():
    images = _embedded()
    assert {"lab_efficiency.png", "bench.png", "exchange_scaling.png", "projection.png"} <= set(images)
    for image in images:
        path = os.path.join(REPO, "docs", image)
        assert os.path.exists(path), f"docs/performance.md embeds {image}, which does not exist"
        width, height = _png_size(path)
        assert width <= 1000 and height <= 600 and os.path.getsize(path) < 200_000, image


def test_the_docstring_names_the_command_that_redraws_the_plots_performance_embeds():
    assert "python -m benchmarks.figures --out docs" in figures.__doc__
    assert set(figures.FIGURES) <= set(_embedded())


def test_the_command_draws_each_figure_from_the_data_file(tmp_path, capsys):
    assert figures.main(["--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for name in figures.FIGURES:
        path = tmp_path / name
        assert path.stat().st_size > 1000 and str(path) in out
        assert _png_size(path) == (800, 450)


def test_a_data_file_that_is_not_json_is_a_one_line_error(tmp_path, capsys):
    bad = tmp_path / "figures.json"
    bad.write_text("{")
    with pytest.raises(SystemExit) as exit_:
        figures.main(["--data", str(bad), "--out", str(tmp_path)])
    assert exit_.value.code == 2 and "is not the figures' data file" in capsys.readouterr().err


def _record_sections():
    """{anchor: text} of the record's sections (## and ### headings)."""
    text = open(RECORD).read()
    parts = re.split(r"^#{2,3} (.+)$", text, flags=re.M)
    slug = lambda h: re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")  # noqa: E731
    return {slug(parts[i]): parts[i + 1] for i in range(1, len(parts), 2)}


SECTIONS = _record_sections()


def test_each_lab_efficiency_is_the_records_median_and_range_in_its_section():
    lab = DATA["lab_efficiency"]
    for setting in lab["settings"]:
        section = SECTIONS[setting["section"]]
        for key in lab["rows"]:
            if key in setting:
                median, lo, hi = setting[key]
                assert f"{median:.2f} ({lo:.2f}-{hi:.2f})" in section, (setting["label"], key)


def test_each_bench_row_is_the_records_median_and_range():
    section = SECTIONS[DATA["bench"]["section"]]
    for name, median, lo, hi in DATA["bench"]["rows"]:
        assert f"{median:.1f} ({lo:.1f}-{hi:.1f})" in section, name


def test_each_exchange_row_is_the_records_and_its_ratio_is_measured_over_model():
    section = SECTIONS[DATA["exchange_scaling"]["section"]]
    for curve, rows in DATA["exchange_scaling"].items():
        if not isinstance(rows, list) or curve == "columns":
            continue
        for hosts, model, median, lo, hi, ratio in rows:
            assert f"| {hosts} | {model:.3f} s | {median:.3f} s ({lo:.3f}-{hi:.3f}) | {ratio:.2f} |" in section, curve
            assert ratio == pytest.approx(median / model, abs=0.006)


def test_the_projection_is_the_records_and_what_benchmarks_efficiency_computes():
    section = SECTIONS[DATA["projection"]["section"]]
    resnet = DATA["exchange_scaling"]["ResNet-50, 102.3 MB, 500 Mbit/s"]
    factor = resnet[-1][2] / resnet[-1][1]  # measured / model at 8 hosts, held for every larger count
    compute = efficiency.DGX_BATCH_PER_GPU / efficiency.DGX_IMAGES_PER_SEC_PER_GPU
    for workers, rate, shown, ring_o, measured_o, ring_n, measured_n in DATA["projection"]["rows"]:
        assert (f"| {workers} | {rate} Gbit/s | {shown:.2f} | {ring_o:.3f} | {measured_o:.3f} | {ring_n:.3f} | "
                f"{measured_n:.3f} |") in section
        assert shown == round(factor, 2)
        for overlap, ring, measured in ((True, ring_o, measured_o), (False, ring_n, measured_n)):
            args = (compute, efficiency.RESNET50_GRADIENT_BYTES, workers, rate * 1e9, overlap)
            assert ring == round(efficiency.projected_efficiency(*args), 3)
            assert measured == pytest.approx(efficiency.projected_efficiency(*args, factor=factor), abs=0.0011)
