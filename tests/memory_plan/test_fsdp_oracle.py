"""``shards=2`` against FSDP2 on two gloo processes on the CPU: each rank's peak
(MemTracker on the real, sharded step) within 10 % of the plan's per-rank peak."""

from __future__ import annotations

import tempfile
from typing import Any

import pytest
import torch
from torch import nn

import hookscope

dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)
fsdp = pytest.importorskip("torch.distributed.fsdp")
if not hasattr(fsdp, "fully_shard"):
    pytest.skip("this torch has no FSDP2 (fully_shard)", allow_module_level=True)


def blocks() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256))
                           for _ in range(4)])


def _rank(rank: int, world: int, path: str, batch: int, queue: Any) -> None:
    from torch.distributed._tools.mem_tracker import MemTracker
    from torch.distributed.device_mesh import init_device_mesh

    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=world)
    try:
        mesh = init_device_mesh("cpu", (world,))
        model = blocks()
        for block in model:
            fsdp.fully_shard(block, mesh=mesh)
        fsdp.fully_shard(model, mesh=mesh)
        x = torch.randn(batch, 256)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        model(x).sum().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        tracker = MemTracker()
        tracker.track_external(model, opt, x)
        with tracker:
            out = model(x)
            loss = out.sum()
            loss.backward()
            del loss
            opt.step()
            del out
        queue.put(tracker.get_tracker_snapshot("peak")[torch.device("cpu")]["Total"])
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.parametrize("batch", [64, 512])
def test_each_rank_peak_is_within_10_percent_of_the_sharded_plan(batch: int) -> None:
    import torch.multiprocessing as mp

    context = mp.get_context("spawn")
    queue = context.Queue()
    with tempfile.TemporaryDirectory() as folder:
        procs = [context.Process(target=_rank, args=(r, 2, f"{folder}/rendezvous", batch, queue))
                 for r in range(2)]
        for p in procs:
            p.start()
        peaks = [queue.get(timeout=300) for _ in procs]
        for p in procs:
            p.join(timeout=60)
    plan = hookscope.memory_plan(blocks(), torch.randn(batch, 256), shards=2)
    for peak in peaks:
        assert plan.peak_bytes == pytest.approx(peak, rel=0.10)
