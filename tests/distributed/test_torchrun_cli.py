"""``torchrun --nproc-per-node 2 -m hookscope trace``: one output per rank, the merged
one with ``--gather``, and the terminal output of rank 0 alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from harness import run_torchrun
from torch import nn

from hookscope.cli import main

pytestmark = pytest.mark.timeout(300)

MODEL = '''
import torch
from torch import nn

def make() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
'''


def _numel() -> int:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    return sum(p.numel() for p in model.parameters())


def test_each_rank_writes_its_own_file_and_rank_0_the_gathered_one(tmp_path: Path) -> None:
    (tmp_path / "net.py").write_text(MODEL)
    code, log = run_torchrun(["-m", "hookscope", "trace", "net.py:make", "-i", "3,8",
                              "-f", "json", "-o", "out.json", "--gather",
                              "--timeline", "timeline.json"], tmp_path)
    assert code == 0, log
    for rank in (0, 1):
        doc = json.loads((tmp_path / f"out.rank{rank}.json").read_text())
        assert doc["meta"]["rank"] == rank and doc["meta"]["world_size"] == 2
        assert doc["model"]["params"]["total"] == _numel()
    merged = json.loads((tmp_path / "out.json").read_text())
    assert [r["meta"]["rank"] for r in merged["ranks"]] == [0, 1]
    assert [len(r["calls"]) for r in merged["ranks"]] == [4, 4]  # 3 layers and the root
    # the timelines: each rank's own, and the merged one with a process per rank
    for rank in (0, 1):
        events = json.loads((tmp_path / f"timeline.rank{rank}.json").read_text())
        assert {e["pid"] for e in events["traceEvents"] if e["ph"] == "X"} == {rank}
    events = json.loads((tmp_path / "timeline.json").read_text())["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    assert {e["pid"] for e in slices} == {0, 1}
    assert sum(e["pid"] == 1 for e in slices) == sum(e["pid"] == 0 for e in slices) == 4


@pytest.mark.slow  # a second torchrun job: about 20 s
def test_rank_0_alone_prints(tmp_path: Path) -> None:
    (tmp_path / "net.py").write_text(MODEL)
    code, log = run_torchrun(["-m", "hookscope", "trace", "net.py:make", "-i", "3,8",
                              "--gather"], tmp_path)
    assert code == 0, log
    assert log.count("Rank 1 time") == 1  # the merged table, printed once
    assert log.count("straggler:") + log.count("no timed call") == 1
    assert not list(tmp_path.glob("*.json"))


def test_gather_outside_torchrun_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    (tmp_path / "net.py").write_text(MODEL)
    assert main(["trace", str(tmp_path / "net.py:make"), "-i", "3,8", "--gather"]) == 2
    err = capsys.readouterr().err
    assert "--gather" in err and "torchrun" in err and "Traceback" not in err
    assert main(["trace", str(tmp_path / "net.py:make"), "-i", "3,8", "--gather",
                 "-f", "csv"]) == 2
    assert "--format table or json" in capsys.readouterr().err


def test_each_rank_gets_its_file_and_only_rank_0_the_terminal() -> None:
    from hookscope.cli.output import OutputTarget
    from hookscope.cli.ranks import Launch, QuietTarget, rank_targets

    to_file = OutputTarget(Path("run/out.json"))
    own, merged = rank_targets(Launch(1, 2), to_file, gather=True)
    assert own.path == Path("run/out.rank1.json") and merged.path == Path("run/out.json")
    own, merged = rank_targets(Launch(0, 2), OutputTarget(None), gather=False)
    assert not isinstance(own, QuietTarget)  # rank 0 prints its own trace
    own, merged = rank_targets(Launch(0, 2), OutputTarget(None), gather=True)
    assert isinstance(own, QuietTarget) and not isinstance(merged, QuietTarget)
    own, merged = rank_targets(Launch(1, 2), OutputTarget(None), gather=True)
    assert isinstance(own, QuietTarget) and isinstance(merged, QuietTarget)
