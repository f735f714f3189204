"""hookscope under torchrun with DistributedDataParallel: two gloo ranks on the CPU.

One spawned run (``workers.ddp``) makes every check on both ranks and writes what it
found; each test below reads one part. The oracles are plain torch, computed in the
workers: the unwrapped model's ``named_modules`` and ``numel``, its gradients from
``torch.autograd.grad``, and a single-process step on the whole batch.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from harness import run_ranks

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out: Path = tmp_path_factory.mktemp("ddp")
    return run_ranks("ddp", out)


def test_summary_and_trace_show_the_unwrapped_model(ranks: list[dict[str, Any]]) -> None:
    for rank, found in enumerate(ranks):
        assert found["summary_paths"] == found["paths"]  # named_modules of the plain model
        assert found["summary_total"] == found["numel"]
        assert "module." not in found["summary_text"]
        assert found["trace_paths"] == sorted(found["paths"])
        assert found["tracer_paths"] == sorted(found["paths"])
        assert found["trace_meta"] == {"rank": rank, "world_size": 2,
                                       "wrappers": ["DistributedDataParallel"]}
        assert found["capture_keys"] == ["block.0", "block.1"]
        assert found["capture_block_keys"] == ["head"]
        assert found["anomaly"] == "None"
        # summary, trace(backward=True) and gather left hooks, values and .grad alone
        assert found["untouched"]


def test_gather_collects_both_ranks_on_rank_0(ranks: list[dict[str, Any]]) -> None:
    g = ranks[0]["gathered"]
    assert ranks[1]["gathered_elsewhere"]
    assert g["world_size"] == 2 and g["ranks"] == [0, 1]
    assert g["totals"] == [ranks[0]["numel"], ranks[1]["numel"]]
    assert g["json_ranks"] == g["calls_per_rank"] == g["roundtrip_calls"] == [7, 7]
    assert "module." not in g["text"]


def test_gathered_gradient_norms_are_each_ranks(ranks: list[dict[str, Any]]) -> None:
    norms = ranks[0]["gathered"]["param_grads"]
    for rank, found in enumerate(ranks):
        for path, expected in found["grad_oracle"].items():
            assert math.isclose(norms[path][rank], expected, rel_tol=1e-5), (path, rank)


def test_the_planted_straggler_is_named(ranks: list[dict[str, Any]]) -> None:
    path, straggler_rank, slowest_rank = ranks[0]["gathered"]["straggler"]
    assert (path, straggler_rank, slowest_rank) == ("slow", 1, 1)
    assert ranks[0]["gathered"]["text"].startswith("straggler: slow (Sleepy) on rank 1")


def test_monitor_norms_are_all_reduced_and_match_one_process(
    ranks: list[dict[str, Any]],
) -> None:
    first = ranks[0]["monitor"]
    for found in ranks:
        mon = found["monitor"]
        assert mon["names"] == list(mon["oracle"])
        assert mon["norms"] == first["norms"]  # the same on both ranks
        for name, norm, at_step in zip(mon["names"], mon["norms"], mon["step_norms"],
                                       strict=True):
            assert math.isclose(norm, mon["oracle"][name], rel_tol=1e-5), name
            assert math.isclose(at_step, mon["oracle"][name], rel_tol=1e-5), name


def test_a_planted_desync_is_reported(ranks: list[dict[str, Any]]) -> None:
    for found in ranks:
        d = found["divergence"]
        assert d["same_ok"] and d["same_compared"] == 7  # 6 parameters and 1 buffer
        assert d["untouched"]  # values and hooks as they were
        (weight, kind, differ, reference, gaps), (buffer, bkind, bdiffer, _, bgaps) = \
            d["diverged"]
        assert (weight, kind, differ, reference) == ("head.weight", "parameter", [1], 0)
        assert math.isclose(gaps[0], 1e-3, rel_tol=1e-3)
        assert (buffer, bkind, bdiffer, bgaps) == ("seen", "buffer", [1], [1.0])
        assert d["text"].startswith("2 of 7 parameters and buffers differ across ranks")


def test_monitor_checks_divergence_every_step(ranks: list[dict[str, Any]]) -> None:
    for found in ranks:
        d = found["divergence"]
        # DDP's forward broadcast rank 0's buffers: the weight alone still differs
        assert d["monitor"] == [[0, ["head.weight"]]]
        assert len(d["warned"]) == 1 and "head.weight on rank 1" in d["warned"][0]


def test_a_collective_inside_forward_is_an_op_of_its_call(
    ranks: list[dict[str, Any]],
) -> None:
    for found in ranks:
        c = found["collectives"]
        assert c["ops"] == [["c10d.allreduce_.default", "1"]]
        assert c["comm_bytes"] == {"": None, "0": None, "1": c["expected_bytes"]}
        assert c["partial"] is False  # communication is no uncounted arithmetic
        assert "Comm bytes" in c["table"]
