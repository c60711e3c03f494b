"""NaturalBench: the loader on a fixture in the dataset's parquet format (items, prompts as the
authors' example.py builds them, images unpacked once), `probe data info naturalbench`, and bad
input (one line naming the file and the field, exit 2)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from vlprobe.cli import app
from vlprobe.data.benchmark_fixtures import write_benchmark_fixture
from vlprobe.data.items import read_rgb
from vlprobe.data.naturalbench import NATURALBENCH_PATTERN, load_naturalbench, naturalbench_report
from vlprobe.registry import DATASETS

#: The release's shards (the dataset BaiqiL/NaturalBench: data/train-0000{0,1,2}-of-00003.parquet).
SHARDS = [Path(f"data/train-{k:05d}-of-00003.parquet") for k in range(3)]


def all_rows(folder: Path) -> list[dict[str, object]]:
    return [row for shard in SHARDS for row in pq.read_table(folder / shard).to_pylist()]


@pytest.fixture(scope="module")
def nb_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_benchmark_fixture(tmp_path_factory.mktemp("nb") / "nb", "naturalbench", n_items=4, seed=1)


def edited(src: Path, dst: Path, change: Callable[[pa.Table], pa.Table]) -> Path:
    shutil.copytree(src, dst)
    for shard in SHARDS:
        pq.write_table(change(pq.read_table(dst / shard)), dst / shard)
    return dst


def test_the_fixture_has_the_releases_files_and_fields(nb_dir: Path) -> None:
    """Three shards named as the release's, its eleven columns (the dataset card's features, 'Question
    Type' spelled as now) with its huggingface metadata, the images as {bytes, path} structs."""
    import json

    assert sorted(p.relative_to(nb_dir) for p in (nb_dir / "data").glob("*.parquet")) == SHARDS
    schema = pq.read_schema(nb_dir / SHARDS[0])
    assert schema.names == ["Index", "Image_0", "Image_1", "Question_0", "Image_0_Question_0", "Image_1_Question_0",
                            "Question_1", "Image_0_Question_1", "Image_1_Question_1", "Question Type", "Source"]
    features = json.loads(schema.metadata[b"huggingface"])["info"]["features"]
    assert features["Image_0"] == {"_type": "Image"} and features["Index"]["dtype"] == "int64"
    assert schema.field("Image_1").type == pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    assert sum(pq.read_metadata(nb_dir / s).num_rows for s in SHARDS) == 8


def test_samples_as_items(nb_dir: Path) -> None:
    ds = DATASETS.get("naturalbench")(nb_dir)
    rows = all_rows(nb_dir)
    assert ds.name == "naturalbench" and len(ds) == 8
    row = rows[3]
    assert row["Question Type"] == "multiple_choice"
    item = ds.item("naturalbench/multiple_choice/3")
    suffix = "Please output the letter corresponding to the correct option."
    assert [t.text for t in item.texts] == [row["Question_0"] + suffix + " A", row["Question_0"] + suffix + " B",
                                            row["Question_1"] + suffix + " A", row["Question_1"] + suffix + " B"]
    assert [t.id for t in item.texts] == [f"{item.id}/c{k}" for k in range(4)]
    assert item.tags == {"subset": ("multiple_choice",), "source": (row["Source"],)}
    assert item.meta["answers"] == NATURALBENCH_PATTERN
    yes_no = ds.item("naturalbench/yes_no/0")
    assert yes_no.texts[0].text == rows[0]["Question_0"] + "Please answer Yes or No. Yes"
    # the embedded images, unpacked into vlprobe's cache, are the bytes of the shard
    for j, im in enumerate(item.images):
        assert im.path is not None and im.path.read_bytes() == row[f"Image_{j}"]["bytes"]
        assert read_rgb(im.path).size == (48, 48)
    again = load_naturalbench(nb_dir, subsets="yes_no", limit=2)
    assert [it.id for it in again] == ["naturalbench/yes_no/0", "naturalbench/yes_no/2"]
    assert again.fingerprint == ds.fingerprint  # the shards' checksums
    assert again.items[0].images[0].path == ds.item("naturalbench/yes_no/0").images[0].path


def test_cli_data_info_counts_off_pattern_answers(nb_dir: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["data", "info", "naturalbench", "--data-dir", str(nb_dir)])
    assert result.exit_code == 0, result.output
    assert "naturalbench/yes_no/0 .. naturalbench/yes_no/6" in result.output
    swapped = edited(nb_dir, tmp_path / "swapped", lambda t: t.set_column(
        t.schema.get_field_index("Image_0_Question_0"), "Image_0_Question_0",
        pa.array(["No" if qt == "yes_no" else "B" for qt in t.column("Question Type").to_pylist()])))
    reports = {r.name: r for r in naturalbench_report(swapped)}
    assert reports["yes_no"].problems == {
        "answers off the scored pattern (q0: Yes/A on i0, No/B on i1; q1 the reverse)": 4}


def test_bad_input(nb_dir: Path, tmp_path: Path, one_error_line: Callable[..., str]) -> None:
    runner = CliRunner()

    def info(folder: Path) -> object:
        return runner.invoke(app, ["data", "info", "naturalbench", "--data-dir", str(folder)])

    def evaluate(folder: Path) -> object:
        return runner.invoke(app, ["eval", "naturalbench", "--model", "caption-length", "--data-dir", str(folder),
                                   "--out", str(tmp_path / "o")])

    other = write_benchmark_fixture(tmp_path / "mmvp", "mmvp-vlm", n_items=2)
    one_error_line(info(other), "data_dir", "no NaturalBench parquet shards", "another benchmark's folder")
    one_error_line(evaluate(other), "data_dir", "another benchmark's folder")
    no_column = edited(nb_dir, tmp_path / "no-column", lambda t: t.drop_columns(["Question_1"]))
    one_error_line(evaluate(no_column), "data_dir", "train-00000-of-00003.parquet", "field 'Question_1' is missing")
    one_error_line(info(no_column), "field 'Question_1' is missing")

    def no_image(t: pa.Table) -> pa.Table:
        cells = t.column("Image_1").to_pylist()
        if len(cells) > 2:  # row 2 of each shard that has one
            cells[2] = None
        return t.set_column(t.schema.get_field_index("Image_1"), "Image_1", pa.array(cells, type=t.schema.field("Image_1").type))

    one_error_line(evaluate(edited(nb_dir, tmp_path / "no-image", no_image)),
                   "data_dir", "train-00000-of-00003.parquet row 2", "field 'Image_1' must be an image")
    bad_answer = edited(nb_dir, tmp_path / "bad-answer", lambda t: t.set_column(
        t.schema.get_field_index("Image_1_Question_1"), "Image_1_Question_1",
        pa.array(["maybe"] * t.num_rows)))
    one_error_line(evaluate(bad_answer), "row 0", "field 'Image_1_Question_1' must be 'Yes' or 'No'", "'maybe'")
