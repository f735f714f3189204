"""hookscope.breakpoint (issue 10): pdb driven for real in a pseudo-terminal, and the
same stop through ``sys.breakpointhook``/``PYTHONBREAKPOINT`` set to a recorder."""

from __future__ import annotations

import os
import sys
import textwrap
import weakref
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import hookscope
from helpers import count_hooks, total_hooks
from hookscope.errors import DebuggerQuit

pexpect = pytest.importorskip("pexpect")

SCRIPT = """
import torch
from torch import nn
import hookscope

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
with hookscope.breakpoint(model, at="2"):
    out = model(torch.randn(3, 4))
print("hooks left:", sum(len(m._forward_hooks) + len(m._forward_pre_hooks)
                         for m in model.modules()))
print("DONE", tuple(out.shape))
"""


def _spawn(tmp_path: Path, env: dict[str, str] | None = None) -> Any:
    script = tmp_path / "stop.py"
    script.write_text(textwrap.dedent(SCRIPT))
    full_env = {k: v for k, v in os.environ.items() if k != "PYTHONBREAKPOINT"}
    full_env.update(env or {})
    return pexpect.spawn(sys.executable, [str(script)], encoding="utf-8", timeout=120,
                         env=full_env, cwd=str(tmp_path))


def test_pdb_in_a_pseudo_terminal_sees_the_layers_locals_and_continues(tmp_path: Path) -> None:
    child = _spawn(tmp_path)
    child.expect(r"hookscope\.breakpoint: after '2' \(Linear, call 0\); locals: module, "
                 r"path, inputs, kwargs, output; 'c' continues")
    child.expect(r"\(Pdb\) ")
    child.sendline("p path")
    child.expect(r"\(Pdb\) ")
    assert "'2'" in child.before
    child.sendline("p output.shape")
    child.expect(r"\(Pdb\) ")
    assert "torch.Size([3, 2])" in child.before
    child.sendline("p type(module).__name__, inputs[0].shape")
    child.expect(r"\(Pdb\) ")
    assert "('Linear', torch.Size([3, 8]))" in child.before
    child.sendline("c")
    child.expect("hooks left: 0")
    child.expect(r"DONE \(3, 2\)")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


NAN_SCRIPT = """
import torch
from torch import nn
import hookscope


class Log(nn.Module):
    def forward(self, x):
        return x.log()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4), Log(),
                                    nn.Linear(4, 4), nn.Linear(4, 2))

    def forward(self, x):
        h = x * 1.0
        return self.layers(h)  # the caller


torch.manual_seed(0)
model = Net()
with hookscope.breakpoint(model, when="nan"):
    out = model(torch.randn(3, 4))
print("DONE", tuple(out.shape))
"""


def test_pdb_opens_once_in_a_frame_of_the_call_s_locals_and_up_reaches_the_caller(
    tmp_path: Path,
) -> None:
    script = tmp_path / "nan.py"
    script.write_text(textwrap.dedent(NAN_SCRIPT))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONBREAKPOINT"}
    child = pexpect.spawn(sys.executable, [str(script)], encoding="utf-8", timeout=120,
                          env=env, cwd=str(tmp_path))
    child.expect(r"hookscope\.breakpoint: after 'layers\.2' \(Log, call 0\) \(nan\)")
    child.expect(r"\(Pdb\) ")
    child.sendline("p sorted(locals())")
    child.expect(r"\(Pdb\) ")
    assert "['inputs', 'kwargs', 'module', 'output', 'path']" in child.before
    child.sendline("where")
    child.expect(r"\(Pdb\) ")
    assert "hookscope/core" not in child.before and "module.py(" not in child.before
    child.sendline("up")  # the Sequential that called the Log
    child.expect(r"\(Pdb\) ")
    assert "input = module(input)" in child.before
    child.sendline("up")  # the model's own forward that called the Sequential
    child.expect(r"\(Pdb\) ")
    assert "return self.layers(h)  # the caller" in child.before
    child.sendline("p h.shape")
    child.expect(r"\(Pdb\) ")
    assert "torch.Size([3, 4])" in child.before
    child.sendline("c")
    child.expect(r"DONE \(3, 2\)")  # no second stop: the NaN's wake is not stopped in
    child.expect(pexpect.EOF)
    assert "hookscope.breakpoint" not in child.before
    child.close()
    assert child.exitstatus == 0


def test_pythonbreakpoint_0_disables_it(monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PYTHONBREAKPOINT", "0")  # sys.breakpointhook reads it on each call
    model = _model()
    with hookscope.breakpoint(model):
        model(torch.randn(3, 4))
    assert "hookscope.breakpoint" not in capsys.readouterr().err
    assert total_hooks(model) == 0


def test_pythonbreakpoint_names_the_debugger(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "hs_recorder.py").write_text(textwrap.dedent("""
        import sys
        SEEN = []
        def record():
            frame = sys._getframe(1)
            SEEN.append((frame.f_locals["path"], tuple(frame.f_locals["output"].shape)))
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONBREAKPOINT", "hs_recorder.record")
    model = _model()
    with hookscope.breakpoint(model, at="2"):
        model(torch.randn(3, 4))
    import hs_recorder

    assert hs_recorder.SEEN == [("2", (3, 2))]


class Recorder:
    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    def __call__(self) -> None:
        frame = sys._getframe(1)
        self.seen.append(dict(frame.f_locals))


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    rec = Recorder()
    monkeypatch.setattr(sys, "breakpointhook", rec)
    return rec


class Log(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.log()


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), Log(), nn.Linear(4, 2))


def test_when_nonfinite_stops_only_where_the_output_is_not_finite(recorder: Recorder) -> None:
    model = _model()
    before = count_hooks(model)
    with hookscope.breakpoint(model, when="nonfinite", every=True):
        model(torch.randn(3, 4))
    assert [s["path"] for s in recorder.seen] == ["1", "2", ""]  # log, then its wake
    assert count_hooks(model) == before
    with hookscope.breakpoint(model, at="0", when="nan"):
        model(torch.randn(3, 4))
    assert len(recorder.seen) == 3  # the Linear's output is finite: no stop


@pytest.mark.parametrize("when", ["nan", "nonfinite"])
def test_a_named_condition_stops_once_where_it_first_becomes_true(
    recorder: Recorder, when: str
) -> None:
    """One NaN in layer 2 of 5 opened the debugger in every later call that held it."""
    torch.manual_seed(0)
    layers = [nn.Linear(4, 4), nn.Linear(4, 4), Log(), nn.Linear(4, 4), nn.Linear(4, 2)]
    model = nn.Sequential(*layers)
    x = torch.randn(3, 4)
    # oracle: plain forward hooks, the calls whose output holds a NaN and input none
    made: list[str] = []
    handles = [m.register_forward_hook(
        lambda m, i, o, n=n: made.append(n) if bool(o.isnan().any())
        and not bool(i[0].isnan().any()) else None) for n, m in model.named_modules()]
    model(x)
    for h in handles:
        h.remove()
    assert made == ["2", ""]  # the Log, then the Sequential that holds it
    with hookscope.breakpoint(model, when=when):
        model(x)
        model(x)  # once per block: the second forward does not stop
    assert [s["path"] for s in recorder.seen] == made[:1]
    assert set(recorder.seen[0]) == {"module", "path", "inputs", "kwargs", "output"}
    assert recorder.seen[0]["module"] is layers[2]
    recorder.seen.clear()
    with hookscope.breakpoint(model, when=when, every=True):
        model(x)
    assert [s["path"] for s in recorder.seen] == ["2", "3", "4", ""]


def test_quitting_the_debugger_is_a_debugger_quit(monkeypatch: pytest.MonkeyPatch) -> None:
    import bdb

    def quit_now() -> None:
        raise bdb.BdbQuit

    monkeypatch.setattr(sys, "breakpointhook", quit_now)
    model = _model()
    with pytest.raises(DebuggerQuit, match="quit from the debugger in '1'"), \
            hookscope.breakpoint(model, when="nan"):
        model(torch.randn(3, 4))
    assert total_hooks(model) == 0


def test_pre_phase_sees_the_inputs_before_forward(recorder: Recorder) -> None:
    model = _model()
    x = torch.randn(3, 4)
    with hookscope.breakpoint(model, at="1", phase="pre"):
        model(x)
    [seen] = recorder.seen
    assert seen["output"] is None and seen["inputs"][0].shape == (3, 4)
    assert isinstance(seen["module"], Log)


def test_backward_phase_sees_grad_output_and_a_callable_condition(recorder: Recorder) -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))

    def big(module: nn.Module, grads: Any) -> bool:
        return bool(grads[0].abs().max() > 0)

    with hookscope.breakpoint(model, at="1", when=big, phase="backward"):
        model(torch.randn(3, 4)).sum().backward()
    [seen] = recorder.seen
    assert seen["path"] == "1" and torch.equal(seen["grad_output"][0], torch.ones(3, 2))
    assert seen["output"].shape == (3, 2)
    assert total_hooks(model) == 0


def test_bad_options_are_spec_errors() -> None:
    with pytest.raises(hookscope.SpecError, match="phase"), hookscope.breakpoint(
        nn.Linear(2, 2), phase="later"
    ):
        pass
    with pytest.raises(hookscope.SpecError, match="when"), hookscope.breakpoint(
        nn.Linear(2, 2), when="negative"
    ):
        pass


def test_a_backward_breakpoint_lets_go_of_calls_that_need_no_gradient() -> None:
    """Every call's inputs and output were kept until its backward, also those made
    under ``torch.no_grad()`` (an evaluation loop inside the block), which have none."""
    import gc
    import weakref

    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    refs = []
    with hookscope.breakpoint(model, at="2", phase="backward", when="nonfinite"):
        for _ in range(5):
            with torch.no_grad():
                out = model(torch.randn(3, 4))
            refs.append(weakref.ref(out))
            del out
        kept = model(torch.randn(3, 4))  # needs a gradient: kept for its backward
        kept_ref = weakref.ref(kept)
        del kept
        gc.collect()
        assert [r() for r in refs] == [None] * 5
        assert kept_ref() is not None


def test_at_a_module_class_stops_in_its_instances_only(recorder: Recorder) -> None:
    model = _model()
    with hookscope.breakpoint(model, at=nn.Linear):
        model(torch.randn(3, 4))
    assert [s["path"] for s in recorder.seen] == ["0", "2"]


def test_backward_phase_checks_every_backward_over_a_retained_graph(recorder: Recorder) -> None:
    """The call's values were let go at its first backward: a second loss over a
    retained graph (multi-loss training) never reached the condition."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    x = torch.randn(3, 4)
    checked: list[bool] = []

    def has_nan(module: nn.Module, grads: Any) -> bool:
        checked.append(bool(torch.isnan(grads[0]).any()))
        return checked[-1]

    with hookscope.breakpoint(model, at="1", phase="backward", when=has_nan):
        out = model(x)
        out.sum().backward(retain_graph=True)
        (out.sum() * float("nan")).backward()
    assert checked == [False, True]
    assert [s["path"] for s in recorder.seen] == ["1"]
    assert torch.equal(recorder.seen[0]["output"], torch.tanh(model[0](x)))  # its locals
    assert total_hooks(model) == 0


def test_backward_phase_keeps_one_step_s_values_at_most(recorder: Recorder) -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    gone: list[Any] = []
    with hookscope.breakpoint(model, phase="backward", when=lambda m, g: False):
        for _ in range(3):
            out = model(torch.randn(3, 4))
            out.sum().backward()
            gone.append(weakref.ref(out))
            del out
        # at most the last step's values are held (until the next forward)
        assert all(ref() is None for ref in gone[:-1])


def test_q_in_the_cli_s_debugger_exits_with_its_own_status(tmp_path: Path) -> None:
    """``q`` exited 2, the status of a usage error."""
    (tmp_path / "models.py").write_text(textwrap.dedent("""
        import torch
        from torch import nn


        class Log(nn.Module):
            def forward(self, x):
                return x.log()


        def nan():
            torch.manual_seed(0)
            return nn.Sequential(nn.Linear(4, 8), Log(), nn.Linear(8, 2))
    """))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONBREAKPOINT"}
    child = pexpect.spawn(
        sys.executable, ["-m", "hookscope", "trace", "models.py:nan", "-i", "3,4",
                         "--break-on", "nan"],
        encoding="utf-8", timeout=120, env=env, cwd=str(tmp_path))
    child.expect(r"hookscope\.breakpoint: after '1' \(Log, call 0\)")
    child.expect(r"\(Pdb\) ")
    child.sendline("q")
    child.expect(pexpect.EOF)
    assert "quit from the debugger in '1'" in child.before
    assert "Traceback" not in child.before
    child.close()
    from hookscope.cli.debug_options import EXIT_DEBUGGER_QUIT

    assert child.exitstatus == EXIT_DEBUGGER_QUIT == 3


POST_MORTEM_SCRIPT = """
import torch
from torch import nn
import hookscope


class Log(nn.Module):
    def forward(self, x):
        return x.log()


class Sqrt(nn.Module):
    def forward(self, y):
        return torch.where(y > 0, y.sqrt(), torch.zeros_like(y))


class Net(nn.Module):
    def __init__(self, act):
        super().__init__()
        self.lin, self.act, self.head = nn.Linear(4, 4), act, nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.act(self.lin(x)))  # the caller


torch.manual_seed(0)
r = hookscope.find_anomaly(Net(Log()), torch.randn(3, 4), pdb=True)
print("FORWARD", r.first.path)
r = hookscope.find_anomaly(Net(Sqrt()), torch.randn(3, 4), backward=True, pdb=True)
print("BACKWARD", r.first.node.name)
"""


def test_find_anomaly_pdb_opens_at_the_anomalous_call_forward_and_backward(
    tmp_path: Path,
) -> None:
    script = tmp_path / "post.py"
    script.write_text(textwrap.dedent(POST_MORTEM_SCRIPT))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONBREAKPOINT"}
    child = pexpect.spawn(sys.executable, [str(script)], encoding="utf-8", timeout=120,
                          env=env, cwd=str(tmp_path))
    child.expect(r"hookscope\.find_anomaly: forward output out of module 'act' \(Log")
    child.expect(r"\(Pdb\) ")
    child.sendline("p sorted(locals())")
    child.expect(r"\(Pdb\) ")
    assert "['inputs', 'kwargs', 'module', 'output', 'path']" in child.before
    child.sendline("p bool(output.isnan().any()), bool(inputs[0].isnan().any())")
    child.expect(r"\(Pdb\) ")
    assert "(True, False)" in child.before
    child.sendline("up")
    child.expect(r"\(Pdb\) ")
    assert "# the caller" in child.before
    child.sendline("c")
    child.expect("FORWARD act")
    child.expect(r"hookscope\.find_anomaly: backward node SqrtBackward0")
    child.expect(r"\(Pdb\) ")
    child.sendline("p sorted(locals())")
    child.expect(r"\(Pdb\) ")
    assert "['grad_inputs', 'grad_outputs', 'module', 'node', 'path']" in child.before
    child.sendline("p node.name(), path, type(module).__name__")
    child.expect(r"\(Pdb\) ")
    assert "('SqrtBackward0', 'act', 'Sqrt')" in child.before
    child.sendline("q")  # ends the session: the report is still returned
    child.expect("BACKWARD SqrtBackward0")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_find_anomaly_pdb_stops_once_with_the_call_s_values(recorder: Recorder) -> None:
    torch.manual_seed(0)
    model, x = _model(), torch.randn(3, 4)
    report = hookscope.find_anomaly(model, x, pdb=True, collect_all=True)
    assert report is not None and len(report.anomalies) > 1
    [seen] = recorder.seen  # the first anomaly only
    assert seen["path"] == "1" and seen["module"] is model[1]
    with torch.no_grad():
        expected = model[1](model[0](x))  # oracle: the call, run by hand
    assert torch.equal(seen["output"].isnan(), expected.isnan())
    assert total_hooks(model) == 0


def test_gpt2_a_nan_in_one_mlp_stops_once_where_it_is_made(recorder: Recorder) -> None:
    """A NaN made in block 1's MLP of a 4-layer GPT-2 opened pdb 8 times at ``*.mlp``."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=4, n_embd=64, n_head=2, vocab_size=100,
                                  n_positions=32, bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    model.transformer.h[1].mlp.act = Log()  # log of negatives: NaN
    ids = torch.randint(0, cfg.vocab_size, (1, 8))
    # oracle: plain forward hooks on the MLPs, in the order their calls end
    holds: list[tuple[str, bool, bool]] = []
    handles = [m.register_forward_hook(
        lambda m, i, o, n=n: holds.append((n, bool(i[0].isnan().any()), bool(o.isnan().any()))))
        for n, m in model.named_modules() if n.endswith(".mlp")]
    with torch.no_grad():
        model(ids)
    for h in handles:
        h.remove()
    first = next(n for n, nan_in, nan_out in holds if nan_out and not nan_in)
    assert first == "transformer.h.1.mlp"
    assert sum(nan_out for _, _, nan_out in holds) == 3  # blocks 1, 2, 3
    with torch.no_grad(), hookscope.breakpoint(model, at="**.mlp", when="nan"):
        model(ids)
    assert [s["path"] for s in recorder.seen] == [first]
    recorder.seen.clear()
    with torch.no_grad(), hookscope.breakpoint(model, at="**.mlp", when="nan", every=True):
        model(ids)
    assert [s["path"] for s in recorder.seen] == [n for n, _, nan_out in holds if nan_out]
    assert total_hooks(model) == 0


class _Scaled(nn.Module):
    """Its output is not its last child's: no two calls share an output gradient."""

    def __init__(self) -> None:
        super().__init__()
        self.lin, self.act, self.head = nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.act(self.lin(x))) * 2


def test_a_backward_breakpoint_on_nan_stops_once_at_the_first_backward(
    recorder: Recorder,
) -> None:
    model = _Scaled()
    x = torch.randn(3, 4)
    order: list[str] = []  # oracle: torch's backward pre-hooks, in autograd's order
    handles = [m.register_full_backward_pre_hook(
        lambda m, go, n=n: order.append(n) if bool(go[0].isnan().any()) else None)
        for n, m in model.named_modules()]
    (model(x) * float("nan")).sum().backward()
    for h in handles:
        h.remove()
    assert sorted(order) == ["", "act", "head", "lin"]
    with hookscope.breakpoint(model, phase="backward", when="nan"):
        (model(x) * float("nan")).sum().backward()
    assert [s["path"] for s in recorder.seen] == order[:1]  # once: the first to receive it
    recorder.seen.clear()
    with hookscope.breakpoint(model, phase="backward", when="nan", every=True):
        (model(x) * float("nan")).sum().backward()
    assert [s["path"] for s in recorder.seen] == order
    assert set(recorder.seen[0]) == {"module", "path", "inputs", "kwargs", "output",
                                     "grad_output"}
    model.zero_grad()
    assert total_hooks(model) == 0
