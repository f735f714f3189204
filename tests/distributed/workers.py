"""The scenarios the spawned ranks of ``harness.run_ranks`` run (one process per rank).

``python workers.py SCENARIO OUT``: initialise the gloo process group from the
environment ``torchrun`` would give, run ``SCENARIO``, write this rank's findings to
``OUT/rank{RANK}.json`` and destroy the group. The oracles are computed here with plain
torch (a copy of the model outside any wrapper, ``param.grad``, ``numel``); the test
compares them with what hookscope reported.
"""

from __future__ import annotations

import copy
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

import hookscope


class Sleepy(nn.Module):
    """An identity that sleeps ``delay`` seconds: the planted straggler."""

    def __init__(self) -> None:
        super().__init__()
        self.delay = 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.delay:
            time.sleep(self.delay)
        return x


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(8, 16)
        self.block = nn.Sequential(nn.Linear(16, 16), nn.Tanh())
        self.slow = Sleepy()
        self.head = nn.Linear(16, 4)
        self.register_buffer("seen", torch.zeros(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.slow(self.block(self.embed(x))))


class Reducing(nn.Module):
    """A layer that all-reduces its activation inside ``forward`` (tensor parallelism)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        dist.all_reduce(y)
        return y


def _collectives(x: torch.Tensor) -> dict[str, Any]:
    """The collective a module issues, as an op of its call, with its bytes."""
    model = nn.Sequential(nn.Linear(8, 8), Reducing())
    t = hookscope.trace(model, x, ops=True)
    return {
        "ops": [[op.name, t.calls[op.call].path] for op in t.ops if "c10d" in op.name],
        "comm_bytes": {c.path: c.facts.get("comm_bytes") for c in t.calls},
        "expected_bytes": x.shape[0] * 8 * torch.float32.itemsize,  # the (4, 8) buffer
        "partial": t.totals_flops.partial,
        "table": str(t),
    }


def _hooks(model: nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) + len(m._backward_hooks)
               for m in model.modules())


def _norms(grads: list[torch.Tensor]) -> list[float]:
    return [float(g.double().norm()) for g in grads]


def ddp(rank: int) -> dict[str, Any]:
    """Everything about a DDP-wrapped model, one check after the other."""
    torch.manual_seed(0)
    net = Net()
    plain = copy.deepcopy(net)  # the single-process oracle
    model = nn.parallel.DistributedDataParallel(net)
    found: dict[str, Any] = {"rank": rank}
    found["numel"] = sum(p.numel() for p in plain.parameters())
    found["paths"] = [n for n, _ in plain.named_modules()]
    torch.manual_seed(100 + rank)  # each rank its own data
    x = torch.randn(4, 8)

    hooks_before = _hooks(model)
    s = hookscope.summary(model, x)
    found["summary_paths"] = list(s.trace.modules)
    found["summary_total"] = s.trace.model.params_total
    found["summary_text"] = str(s)

    net.slow.delay = 0.05 if rank == 1 else 0.0
    t = hookscope.trace(model, x, backward=True)
    net.slow.delay = 0.0
    found["trace_paths"] = sorted({c.path for c in t.calls})
    found["trace_meta"] = {k: t.meta.get(k) for k in ("rank", "world_size", "wrappers")}
    params = [p for _, p in plain.named_parameters()]
    oracle = torch.autograd.grad(plain(x).sum(), params)
    found["grad_oracle"] = dict(zip([n for n, _ in plain.named_parameters()],
                                    _norms(list(oracle)), strict=True))
    gathered = t.gather(dst=0)
    if rank == 0:
        assert gathered is not None
        found["gathered"] = _gathered(gathered)
    else:
        found["gathered_elsewhere"] = gathered is None

    found["untouched"] = _hooks(model) == hooks_before and all(
        p.grad is None and torch.equal(p, q)
        for p, q in zip(net.parameters(), plain.parameters(), strict=True))
    with hookscope.Tracer(model) as tracer:
        model(x).sum().backward()
    assert tracer.trace is not None
    found["tracer_paths"] = sorted({c.path for c in tracer.trace.calls})
    model.zero_grad()

    found["anomaly"] = repr(hookscope.find_anomaly(model, x))
    found["capture_keys"] = sorted(hookscope.capture(model, x, select="block.*"))
    with hookscope.Capture(model, select="head") as cap:
        model(x)
    found["capture_block_keys"] = sorted(cap.activations)

    found["collectives"] = _collectives(x)
    found["monitor"] = _monitor(model, plain, rank)
    found["divergence"] = _divergence(model, rank)
    return found


def _gathered(g: Any) -> dict[str, Any]:
    top = g.stragglers()[0]
    doc = json.loads(g.to_json())
    back = hookscope.GatheredTrace.from_json(g.to_json())
    return {
        "world_size": g.world_size,
        "ranks": [t.meta.get("rank") for t in g.traces],
        "totals": [t.model.params_total for t in g.traces],
        "straggler": [top.path, top.straggler_rank, top.slowest_rank],
        "text": str(g),
        "json_ranks": [len(r["calls"]) for r in doc["ranks"]],
        "calls_per_rank": [len(t.calls) for t in g.traces],
        "roundtrip_calls": [len(t.calls) for t in back.traces],
        "param_grads": {k: list(v) for k, v in g.param_grads.items()},
    }


def _monitor(model: nn.Module, plain: nn.Module, rank: int) -> dict[str, Any]:
    """One DDP step under the monitor, each rank on its half of the batch; the oracle
    is the unwrapped copy's gradient on the whole batch."""
    torch.manual_seed(7)
    xs, ys = torch.randn(8, 8), torch.randn(8, 4)
    part = slice(4 * rank, 4 * rank + 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    with hookscope.GradientMonitor(model, optimizer=opt) as mon:
        nn.functional.mse_loss(model(xs[part]), ys[part]).backward()
        opt.step()
        opt.zero_grad()
    nn.functional.mse_loss(plain(xs), ys).backward()
    oracle = {n: float(p.grad.double().norm()) for n, p in plain.named_parameters()}
    return {"names": list(mon.names), "norms": mon.history.norms[0],
            "step_norms": mon.history.step_norms[0], "oracle": oracle}


def _divergence(model: nn.Module, rank: int) -> dict[str, Any]:
    net = model.module
    before = {n: t.clone() for n, t in net.state_dict().items()}
    hooks = sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in net.modules())
    same = hookscope.check_divergence(model)
    untouched = all(torch.equal(before[n], t) for n, t in net.state_dict().items()) and \
        hooks == sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in net.modules())
    with torch.no_grad():
        if rank == 1:
            net.head.weight[1, 2] += 1e-3
            net.seen += 1
    report = hookscope.check_divergence(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with hookscope.GradientMonitor(model, optimizer=opt, check_divergence_every=1) as mon:
            model(torch.ones(2, 8)).sum().backward()
            opt.step()
    return {
        "same_ok": same.ok, "same_compared": same.compared, "untouched": untouched,
        "diverged": [[d.path, d.kind, list(d.ranks), d.reference_rank, list(d.max_abs_diff)]
                     for d in report.diverged],
        "text": str(report),
        "monitor": [[step, [d.path for d in r.diverged]] for step, r in mon.divergences],
        "warned": [str(w.message) for w in caught if "differ across ranks" in str(w.message)],
    }


def fsdp(rank: int) -> dict[str, Any]:
    """An FSDP2 model (``fully_shard``): counts, shapes and full gradient norms."""
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 5))
    plain = copy.deepcopy(net)  # the unsharded oracle
    fully_shard(net[0], reshard_after_forward=False)  # unsharded until the backward
    fully_shard(net[2])
    fully_shard(net)
    found: dict[str, Any] = {"numel": sum(p.numel() for p in plain.parameters())}
    found["local"] = {n: p.to_local().numel() for n, p in net.named_parameters()}
    x = torch.randn(4, 8)
    s = hookscope.summary(net, x)
    found["total"] = s.trace.model.params_total
    found["sharded"] = s.trace.meta.get("sharded")
    found["summary_text"] = str(s)
    shapes = {c.path: [list(m.shape) for m in c.outputs] for c in s.trace.calls}
    found["shapes"] = shapes
    found["plain_shapes"] = {"0": [list(plain[0](x).shape)], "2": [[4, 5]]}
    found.update(_fsdp_trace_grads(net, plain, x))
    torch.manual_seed(7)
    xs, ys = torch.randn(8, 8), torch.randn(8, 5)
    part = slice(4 * rank, 4 * rank + 4)
    opt = torch.optim.SGD(net.parameters(), lr=0.0)
    with hookscope.GradientMonitor(net, optimizer=opt) as mon:
        nn.functional.mse_loss(net(xs[part]), ys[part]).backward()
        opt.step()
        opt.zero_grad()
    with hookscope.Tracer(net, grads=True) as tr:  # FSDP's own backward, its .grads
        nn.functional.mse_loss(net(xs[part]), ys[part]).backward()
    found["tracer_grads"] = {g.path: [g.status, g.norm] for g in tr.trace.param_grads}
    found["tracer_full"] = {n: float(p.grad.full_tensor().double().norm())
                            for n, p in net.named_parameters()}
    opt.zero_grad()
    nn.functional.mse_loss(plain(xs), ys).backward()
    found["monitor"] = {"names": list(mon.names), "norms": mon.history.norms[0],
                        "step_norms": mon.history.step_norms[0],
                        "oracle": {n: float(p.grad.double().norm())
                                   for n, p in plain.named_parameters()}}
    return found


def _fsdp_trace_grads(net: nn.Module, plain: nn.Module, x: torch.Tensor) -> dict[str, Any]:
    """trace(backward=True) on the FSDP2 model: its norms, the unsharded model's
    (``torch.autograd.grad`` of the same default loss, the sum of the output), the
    assumption of ``torch_private.fsdp_unsharded_params``, and the model left as it was;
    then with the unsharded parameters hidden (the planted fault): a warning."""
    from hookscope.core import torch_private

    found: dict[str, Any] = {}
    pairs = torch_private.fsdp_unsharded_params(net)  # after summary's forward
    unsharded = {id(s): u for s, u in pairs}
    # net[0] (reshard_after_forward=False) holds its unsharded parameters now
    of = {id(t): (s, u) for s, u in pairs for t in (s, u)}
    found["unsharded"] = {n: [hasattr(of[id(p)][0], "device_mesh"), list(of[id(p)][1].shape),
                              list(of[id(p)][0].shape), of[id(p)][1] is p]
                          for n, p in net.named_parameters()}
    hooks_before = [len(t._backward_hooks or {}) for t in unsharded.values()]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t = hookscope.trace(net, x, backward=True)
    found["warned"] = [str(w.message) for w in caught if "FSDP2" in str(w.message)]
    found["trace_grads"] = {g.path: [g.status, g.norm] for g in t.param_grads}
    grads = torch.autograd.grad(plain(x).sum(), list(plain.parameters()))
    found["trace_oracle"] = {n: float(g.double().norm())
                             for (n, _), g in zip(plain.named_parameters(), grads, strict=True)}
    found["grads_after"] = [p.grad is None for p in net.parameters()] + \
        [u.grad is None for u in unsharded.values()]
    found["hooks_same"] = hooks_before == [len(t._backward_hooks or {})
                                           for t in unsharded.values()]
    found["sharded_back"] = all(is_sharded for is_sharded in
                                (hasattr(p, "device_mesh") for p in net.parameters()))
    hidden, torch_private.fsdp_unsharded_params = (  # type: ignore[assignment]
        torch_private.fsdp_unsharded_params, lambda model: [])
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            t = hookscope.trace(net, x, backward=True)
    finally:
        torch_private.fsdp_unsharded_params = hidden
    found["hidden_grads"] = sorted({g.status for g in t.param_grads})
    found["hidden_warned"] = [str(w.message) for w in caught if "FSDP2" in str(w.message)]
    return found


def main() -> None:
    scenario, out = sys.argv[1], Path(sys.argv[2])
    dist.init_process_group("gloo")
    try:
        rank = dist.get_rank()
        found = globals()[scenario](rank)
        (out / f"rank{rank}.json").write_text(json.dumps(found))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
