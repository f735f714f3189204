"""FSDP2 (``torch.distributed.fsdp.fully_shard``) on two gloo ranks on the CPU: the
counts and shapes are the unsharded model's, the monitor's norms the full gradients'.
The oracle is an unsharded copy of the model, made before sharding, stepped in one
process on the whole batch."""

from __future__ import annotations

import math
from typing import Any

import pytest
from harness import run_ranks

pytestmark = pytest.mark.timeout(300)


def _fsdp2_available() -> str | None:
    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401
    except ImportError as e:
        return f"this torch has no FSDP2 (torch.distributed.fsdp.fully_shard): {e}"
    return None


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    reason = _fsdp2_available()
    if reason is not None:
        pytest.skip(reason)
    return run_ranks("fsdp", tmp_path_factory.mktemp("fsdp"))


def test_counts_are_the_unsharded_models_with_the_local_shards_beside(
    ranks: list[dict[str, Any]],
) -> None:
    for rank, found in enumerate(ranks):
        assert found["total"] == found["numel"]
        sharded = found["sharded"]
        assert {path: local for path, (_, local) in sharded.items()} == found["local"]
        assert sum(full for full, _ in sharded.values()) == found["numel"]
        assert f"elements on rank {rank}" in found["summary_text"]
        assert found["shapes"]["0"] == found["plain_shapes"]["0"]
        assert found["shapes"]["2"] == found["plain_shapes"]["2"]


def test_monitor_norms_are_the_full_gradients(ranks: list[dict[str, Any]]) -> None:
    for found in ranks:
        mon = found["monitor"]
        assert mon["names"] == list(mon["oracle"])
        for name, norm, at_step in zip(mon["names"], mon["norms"], mon["step_norms"],
                                       strict=True):
            assert math.isclose(norm, mon["oracle"][name], rel_tol=1e-5), name
            assert math.isclose(at_step, mon["oracle"][name], rel_tol=1e-5), name
    assert ranks[0]["monitor"]["norms"] == ranks[1]["monitor"]["norms"]


def test_trace_backward_norms_are_the_full_parameters(
    ranks: list[dict[str, Any]],
) -> None:
    for found in ranks:
        assert found["warned"] == []
        oracle = found["trace_oracle"]
        assert list(found["trace_grads"]) == list(oracle)
        for path, (status, norm) in found["trace_grads"].items():
            assert status == "ok", path
            assert math.isclose(norm, oracle[path], rel_tol=1e-5), path
    assert ranks[0]["trace_grads"] == ranks[1]["trace_grads"]  # the same x on both


def test_tracer_around_fsdps_own_backward_reports_the_full_gradients(
    ranks: list[dict[str, Any]],
) -> None:
    """FSDP's reduce-scattered gradients (the mean over the ranks' halves of the batch):
    the unsharded model's on the whole batch, and ``.grad.full_tensor()``'s."""
    for found in ranks:
        oracle = found["monitor"]["oracle"]
        assert list(found["tracer_grads"]) == list(oracle)
        for path, (status, norm) in found["tracer_grads"].items():
            assert status == "ok", path
            assert math.isclose(norm, oracle[path], rel_tol=1e-5), path
            assert math.isclose(norm, found["tracer_full"][path], rel_tol=1e-6), path


def test_trace_backward_leaves_the_fsdp_model_as_it_was(
    ranks: list[dict[str, Any]],
) -> None:
    for found in ranks:
        assert all(found["grads_after"])  # no .grad: FSDP reduce-scattered nothing
        assert found["hooks_same"] and found["sharded_back"]


def test_unsharded_params_are_fsdps_all_gathered_leaves(
    ranks: list[dict[str, Any]],
) -> None:
    """The assumption of ``torch_private.fsdp_unsharded_params``: after a forward, each
    parameter is a sharded ``DTensor`` or its unsharded plain tensor (of the logical
    shape), on the module until FSDP reshards (``reshard_after_forward=False``: after
    the backward)."""
    for found in ranks:
        got = found["unsharded"]
        assert sorted(got) == ["0.bias", "0.weight", "2.bias", "2.weight"]
        for path, (sharded, shape, logical, on_module) in got.items():
            assert sharded and shape == logical, path
            assert on_module == path.startswith("0."), path


def test_trace_backward_warns_when_the_unsharded_params_are_not_found(
    ranks: list[dict[str, Any]],
) -> None:
    for found in ranks:
        assert found["hidden_grads"] == ["no_backward"]
        assert len(found["hidden_warned"]) == 1
        assert "GradientMonitor" in found["hidden_warned"][0]
