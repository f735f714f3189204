"""``hookscope trace --timeline FILE``: the file a consumer loads, and its one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import assert_one_error_line, run_cli
from timeline_checks import check_all

CNN = "hookscope.examples:small_cnn"


def test_repeated_runs_give_the_timeline_of_the_median_times(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "timeline.json"
    code, _, err = run_cli(capsys, "trace", CNN, "-i", "1,3,32,32", "--repeat", "3",
                           "--timeline", str(path), "-f", "json")
    assert code == 0, err
    check_all(path)


def test_timeline_is_written_beside_the_table(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "timeline.json"
    code, out, err = run_cli(capsys, "trace", CNN, "-i", "1,3,32,32", "--backward",
                             "--ops", "--timeline", str(path))
    assert code == 0, err
    assert "conv" in out.lower()  # the table still goes to stdout
    events = check_all(path)
    phases = {e["ph"] for e in events}
    assert {"X", "M", "C", "s", "f"} <= phases
    assert any(e.get("cat") == "op" for e in events if e["ph"] == "X")  # ops as slices
    tracks = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert tracks == {"forward (host times)", "backward (host times)"}
    assert len({e["tid"] for e in events if e["ph"] == "X"}) == 2


@pytest.mark.parametrize(("where", "extra", "fragment"), [
    ("missing/t.json", (), "does not exist"),
    (".", (), "is a directory"),
    ("t.json", ("--no-time",), "--no-time turns timing off"),
    ("t.json", ("--device", "meta"), "nothing is timed on --device meta"),
    ("t.json", ("--find-anomaly",), "do not go together"),
    ("t.json", ("-o", "t.json"), "name the same file"),
    ("-", (), "needs a file name"),
])
def test_bad_timeline_is_one_line_and_nothing_is_written(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, where: str, extra: tuple[str, ...],
    fragment: str,
) -> None:
    target = where if where == "-" else str(tmp_path / where)
    extra = tuple(str(tmp_path / e) if e.endswith(".json") else e for e in extra)
    code, _, err = run_cli(capsys, "trace", CNN, "-i", "1,3,32,32", *extra,
                           "--timeline", target)
    assert_one_error_line(code, err, fragment)
    assert not list(tmp_path.iterdir())
