"""Captures on disk (issue 11): a save/load round trip is bit-exact; memory stays bounded
while a capture larger than the limit is written (measured in a subprocess); an
interrupted or killed capture leaves a directory that ``load_activations`` rejects,
or reads as partial when asked; nothing is pickled."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import hookscope
from helpers import total_hooks


class Step(nn.Module):
    """``x + 1``; the ``fail_at``-th instance raises (or kills the process)."""

    def __init__(self, i: int, fail_at: int = -1, how: str = "raise") -> None:
        super().__init__()
        self.i, self.fail_at, self.how = i, fail_at, how

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.i == self.fail_at:
            if self.how == "kill":
                import os
                import signal

                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError(f"step {self.i} failed")
        return x + 1


def test_round_trip_is_bit_exact_and_lazy(tmp_path: Path) -> None:
    class Mixed(nn.Module):
        def forward(self, x: torch.Tensor) -> Any:
            return {"half": x.half(), "ints": (x * 100).long(), "t": x.transpose(1, 2),
                    "none": None}

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.Flatten(), nn.Unflatten(1, (8, -1)), Mixed())
    x = torch.randn(2, 3, 6, 6)
    in_memory = hookscope.capture(model, x, select="**")
    on_disk = hookscope.capture(model, x, select="**", save_to=tmp_path / "acts",
                                shard_mib=0.001)
    assert isinstance(on_disk, hookscope.interventions.storage.Activations)
    assert on_disk.complete and sorted(on_disk) == sorted(in_memory)
    assert len(list((tmp_path / "acts").glob("shard-*.safetensors"))) > 1  # streamed
    reread = hookscope.load_activations(tmp_path / "acts")
    for name, value in in_memory.items():
        _assert_same(reread[name], value)
    assert not list((tmp_path / "acts").glob("*.tmp"))
    assert not any(p.suffix in (".pt", ".pkl", ".bin") for p in (tmp_path / "acts").iterdir())
    index = json.loads((tmp_path / "acts" / "index.json").read_text())
    assert index["complete"] is True and index["error"] is None


def _assert_same(got: Any, expected: Any) -> None:
    if isinstance(expected, torch.Tensor):
        assert got.dtype == expected.dtype and torch.equal(got, expected)
    elif isinstance(expected, dict):
        assert set(got) == set(expected)
        for k in expected:
            _assert_same(got[k], expected[k])
    else:
        assert got == expected


def test_an_exception_mid_capture_leaves_an_interrupted_capture(tmp_path: Path) -> None:
    model = nn.Sequential(*[Step(i, fail_at=5) for i in range(8)])
    with pytest.raises(RuntimeError, match="step 5"):
        hookscope.capture(model, torch.zeros(3), select="*", save_to=tmp_path / "a",
                          shard_mib=1e-5)
    assert total_hooks(model) == 0
    with pytest.raises(hookscope.SpecError, match=r"interrupted capture.*step 5.*partial=True"):
        hookscope.load_activations(tmp_path / "a")
    partial = hookscope.load_activations(tmp_path / "a", partial=True)
    assert not partial.complete and "step 5" in str(partial.error)
    assert sorted(partial) == ["0", "1", "2", "3", "4"]
    assert torch.equal(partial["4"], torch.full((3,), 5.0))
    assert "PARTIAL" in repr(partial)


def test_a_killed_capture_is_rejected_or_read_as_partial(tmp_path: Path) -> None:
    code = textwrap.dedent(f"""
        import sys, torch
        from torch import nn
        sys.path[:0] = [{str(Path(__file__).parent)!r}, {str(Path(__file__).parents[1])!r}]
        from test_storage import Step
        import hookscope
        model = nn.Sequential(*[Step(i, fail_at=6, how="kill") for i in range(9)])
        hookscope.capture(model, torch.zeros(1000), select="*", save_to={str(tmp_path / "k")!r},
                          shard_mib=0.01)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120,
                          check=False)
    assert proc.returncode == -9, proc.stderr.decode()
    assert not (tmp_path / "k" / "index.json").exists()
    with pytest.raises(hookscope.SpecError, match=r"no index\.json.*did not finish"):
        hookscope.load_activations(tmp_path / "k")
    partial = hookscope.load_activations(tmp_path / "k", partial=True)
    assert not partial.complete
    assert sorted(partial) == ["0", "1", "2", "3", "4", "5"]  # each a finished shard
    assert torch.equal(partial["5"], torch.full((1000,), 6.0))


def test_a_directory_in_use_or_not_a_capture_is_a_spec_error(tmp_path: Path) -> None:
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    model = nn.Sequential(nn.Linear(2, 2))
    with pytest.raises(hookscope.SpecError, match="not an empty directory"):
        hookscope.capture(model, torch.randn(1, 2), select="0", save_to=tmp_path / "full")
    assert (tmp_path / "full" / "notes.txt").read_text() == "mine"
    with pytest.raises(hookscope.SpecError, match="no hookscope capture"):
        hookscope.load_activations(tmp_path / "full")
    with pytest.raises(hookscope.SpecError, match="not a directory"):
        hookscope.load_activations(tmp_path / "missing")


@pytest.mark.parametrize("umask", [0o022, 0o007])
def test_every_file_of_a_capture_gets_the_umask_s_permissions(
    tmp_path: Path, umask: int
) -> None:
    """Shards and the index get the mode ``open`` gives a new file under the umask
    (safetensors alone writes owner-only files)."""
    import os
    import stat

    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    old = os.umask(umask)
    try:
        with open(tmp_path / "reference", "w") as f:  # the oracle: a plain new file
            f.write("x")
        hookscope.capture(model, torch.randn(1, 2), select="*", save_to=tmp_path / "acts",
                          shard_mib=1e-6)
    finally:
        os.umask(old)
    expected = stat.S_IMODE((tmp_path / "reference").stat().st_mode)
    files = sorted((tmp_path / "acts").iterdir())
    assert [p.name for p in files] == ["index.json", "shard-00000.safetensors",
                                       "shard-00001.safetensors"]
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in files} == dict.fromkeys(
        (p.name for p in files), expected)


MEMORY_SCRIPT = """
import json, resource, sys, torch
from torch import nn
import hookscope

class Fresh(nn.Module):
    def forward(self, x):
        return x + 1  # a new 16 MiB tensor per call

model = nn.Sequential(*[Fresh() for _ in range(24)])
x = torch.zeros(4 * 2**20)
with torch.no_grad():
    model(x)
def rss():
    # the peak resident memory since the reset below (VmHWM); ru_maxrss alone would
    # start at the peak of the pytest process this one was forked from
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
try:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the peak to the current resident size
except OSError:
    pass
base = rss()
save_to = sys.argv[1] if len(sys.argv) > 1 else None
acts = hookscope.capture(model, x, select="*", save_to=save_to, shard_mib=16)
print(json.dumps({"delta": rss() - base, "size": 24 * 16 * 2**20, "n": len(acts)}))
"""


def _peak_delta(*argv: str) -> dict[str, int]:
    proc = subprocess.run([sys.executable, "-c", MEMORY_SCRIPT, *argv], capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_saving_a_capture_larger_than_the_limit_keeps_memory_bounded(tmp_path: Path) -> None:
    """384 MiB of activations, shards of 16 MiB: the peak grows by well under the
    capture's size (one shard queued, its serialised copy, the call being written);
    the same capture in memory grows it by at least the capture's size (the oracle
    that the measurement sees captured memory at all)."""
    saved = _peak_delta(str(tmp_path / "acts"))
    held = _peak_delta()
    assert saved["n"] == held["n"] == 24  # the 24 children: "*" never selects the root
    assert held["delta"] >= 0.9 * held["size"], held
    # a few shards' worth (the output, its copy, the shard and its serialised bytes),
    # not the 384 MiB capture
    assert saved["delta"] < 160 * 2**20, saved


class _Pair(nn.Module):
    """Returns a tuple, and has a child named ``0`` (as a Sequential's first child)."""

    def __init__(self) -> None:
        super().__init__()
        self.add_module("0", nn.Linear(4, 4))
        self.add_module("a", nn.Identity())

    def forward(self, x: torch.Tensor) -> Any:
        h = getattr(self, "0")(x)
        return h * 2, {"0": h * 3, "0.0": h * 4}, self.a(h)


def test_values_whose_tensor_keys_look_alike_are_each_read_back(tmp_path: Path) -> None:
    """A tuple element of ``layers.0`` was stored under ``layers.0.0``, the key of its
    child's call, and one overwrote the other: the disk gave the wrong tensor."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.ModuleList([_Pair()]))
    model.forward = lambda x: model[0][0](x)  # type: ignore[method-assign]
    x = torch.randn(2, 4)
    memory = hookscope.capture(model, x, select="**")
    hookscope.capture(model, x, select="**", save_to=tmp_path / "cap")
    disk = hookscope.load_activations(tmp_path / "cap")
    assert list(disk) == list(memory) and {"0.0", "0.0.0"} <= set(memory)
    for name in memory:
        flat_memory, flat_disk = _tensors(memory[name]), _tensors(disk[name])
        assert len(flat_memory) == len(flat_disk) > 0
        assert all(torch.equal(a, b) for a, b in zip(flat_memory, flat_disk, strict=True))


def _tensors(value: Any) -> list[torch.Tensor]:
    from torch.utils._pytree import tree_leaves

    return [t for t in tree_leaves(value) if isinstance(t, torch.Tensor)]


def test_calls_of_a_module_come_back_in_call_order(tmp_path: Path) -> None:
    """The index was written with sorted keys: ``0#10`` came before ``0#2``."""
    model = nn.Sequential(nn.Identity())
    with hookscope.Capture(model, select="0", save_to=tmp_path / "cap"):
        for i in range(12):
            model(torch.full((1,), float(i)))
    disk = hookscope.load_activations(tmp_path / "cap")
    assert [float(v) for v in disk.calls_of("0")] == [float(i) for i in range(12)]
    assert list(disk) == ["0"] + [f"0#{i}" for i in range(1, 12)]


def test_a_write_that_fails_is_named_and_leaves_an_interrupted_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk was reported as "the model raised no failure recorded", and the
    failed shard was written again at close, whose second failure hid the first and
    left no index."""
    import safetensors.torch

    real, writes = safetensors.torch.save_file, []

    def save_file(tensors: Any, path: str, metadata: Any = None) -> None:
        writes.append(path)
        if len(writes) >= 2:
            raise OSError(28, "No space left on device")
        real(tensors, path, metadata)

    monkeypatch.setattr(safetensors.torch, "save_file", save_file)
    model = nn.Sequential(*[nn.Linear(256, 256) for _ in range(4)])
    with pytest.raises(hookscope.HookscopeError, match="No space left on device") as caught:
        hookscope.capture(model, torch.randn(256, 256), select="*",
                          save_to=tmp_path / "cap", shard_mib=0.2)
    assert not isinstance(caught.value, hookscope.ModelRunError)
    assert len(writes) == 2  # the failed shard was not written again
    index = json.loads((tmp_path / "cap" / "index.json").read_text())
    assert index["complete"] is False and "No space left on device" in index["error"]
    partial = hookscope.load_activations(tmp_path / "cap", partial=True)
    assert list(partial) == ["0"]


def test_a_dataclass_output_is_copied_saved_and_patched_field_by_field(tmp_path: Path) -> None:
    """pytree leaves a dataclass whole: the capture kept the live object (not detached,
    changed by later in-place ops), the disk kept only its repr, and patches.zero() did
    nothing."""
    from dataclasses import dataclass

    @dataclass
    class Out:
        hidden: torch.Tensor
        extra: tuple[torch.Tensor, int]

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x: torch.Tensor) -> Out:
            h = self.fc(x)
            return Out(h, (h * 2, 7))

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.block = Block()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out = self.block(x)
            out.hidden.mul_(10)  # in place, after the call
            return out.hidden + out.extra[0]

    torch.manual_seed(0)
    model, x = Model(), torch.randn(2, 3)
    with torch.no_grad():
        at_exit = model.block.fc(x)
    with hookscope.Capture(model, select="block") as cap:
        model(x)
    kept = cap.activations["block"]
    assert isinstance(kept, Out) and not kept.hidden.requires_grad
    assert torch.equal(kept.hidden, at_exit) and torch.equal(kept.extra[0], at_exit * 2)
    hookscope.capture(model, x, select="block", save_to=tmp_path / "cap")
    back = hookscope.load_activations(tmp_path / "cap")["block"]
    assert torch.equal(back.hidden, at_exit) and back.extra[1] == 7
    assert back.fields_of.endswith("Out")
    with torch.no_grad(), hookscope.patch(model, {"block": hookscope.patches.zero()}):
        assert torch.equal(model(x), torch.zeros(2, 3))


def test_activations_inside_a_saving_block_is_an_error_not_an_empty_dict(
    tmp_path: Path,
) -> None:
    model = nn.Sequential(nn.Identity())
    with hookscope.Capture(model, select="0", save_to=tmp_path / "cap") as cap:
        model(torch.ones(1))
        with pytest.raises(hookscope.SpecError, match="after the with block"):
            cap.activations  # noqa: B018
    assert list(cap.activations) == ["0"]


def test_a_dataclass_field_named_like_a_child_module_keeps_its_own_key(
    tmp_path: Path,
) -> None:
    from dataclasses import dataclass

    @dataclass
    class Out:
        features: torch.Tensor

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.features = nn.Linear(2, 2)

        def forward(self, x: torch.Tensor) -> Out:
            return Out(self.features(x) * 3)

    model = nn.Sequential()
    model.add_module("net", Net())
    model.forward = lambda x: model.net(x)  # type: ignore[method-assign]
    x = torch.randn(1, 2)
    memory = hookscope.capture(model, x, select="net.**")
    hookscope.capture(model, x, select="net.**", save_to=tmp_path / "cap")
    disk = hookscope.load_activations(tmp_path / "cap")
    assert torch.equal(disk["net"].features, memory["net"].features)
    assert torch.equal(disk["net.features"], memory["net.features"])


def test_a_sparse_output_is_saved_dense(tmp_path: Path) -> None:
    """``encode_tree`` called ``.contiguous()`` on it: the capture stopped with a
    ProbeError (``unsupported memory format option Contiguous``)."""

    class Sparse(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.to_sparse()

    x = torch.eye(3) * 2
    acts = hookscope.capture(Sparse(), x, select="<root>", save_to=tmp_path / "c")
    (value,) = acts.values()
    assert value.layout == torch.strided and torch.equal(value, x)


class _IntHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> dict[Any, torch.Tensor]:
        return {0: self.a(x), (1, "b"): self.b(x)}


class _UsesHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.heads = _IntHeads()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.heads(x)
        return out[0] + out[(1, "b")]


def test_a_dict_with_keys_other_than_strings_is_saved_and_patched_back(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model, clean, corrupt = _UsesHeads(), torch.randn(2, 4), torch.randn(2, 4)
    disk = hookscope.capture(model, clean, select="heads", save_to=tmp_path / "acts")
    with torch.no_grad():
        heads = model.heads(clean)
        want, unpatched = model(clean), model(corrupt)
    stored = hookscope.load_activations(tmp_path / "acts")["heads"]
    assert list(stored) == [0, (1, "b")]
    assert all(torch.equal(stored[k], heads[k]) for k in heads)
    with torch.no_grad(), hookscope.patch(model, {"heads": hookscope.patches.replace_with(disk)}):
        got = model(corrupt)
    assert torch.equal(got, want) and not torch.equal(got, unpatched)


class _Ragged(nn.Module):
    """Returns a nested tensor of the first ``lengths`` rows of each sample, built by
    torch (as ``nn.TransformerEncoder``'s fast path hands them between its layers)."""

    def __init__(self, layout: torch.layout, transpose: bool) -> None:
        super().__init__()
        self.fc, self.layout, self.transpose = nn.Linear(4, 4), layout, transpose

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        out = torch.nested.nested_tensor([h[0, :5], h[1, :3]], layout=self.layout)
        return out.transpose(1, 2) if self.transpose else out


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors:UserWarning")
@pytest.mark.parametrize(("layout", "transpose"), [
    (torch.strided, False), (torch.jagged, False), (torch.jagged, True)],
    ids=["strided", "jagged", "jagged-transposed"])
def test_a_nested_tensor_is_saved_as_its_components(
    tmp_path: Path, layout: torch.layout, transpose: bool
) -> None:
    """safetensors refused it ("NestedTensorImpl doesn't support sizes"): the capture
    died, leaving a directory with only an interrupted index."""
    torch.manual_seed(0)
    model, x = nn.Sequential(_Ragged(layout, transpose)), torch.randn(2, 5, 4)
    acts = hookscope.capture(model, x, select="0", save_to=tmp_path / "c")
    with torch.no_grad():  # the oracle: the rows each sample keeps, by plain torch
        h = model[0].fc(x)
    want = [h[0, :5], h[1, :3]]
    if transpose:
        want = [part.T for part in want]
    back = acts["0"]
    assert acts.complete and back.is_nested and back.layout == layout  # type: ignore[attr-defined]
    parts = back.unbind()
    assert len(parts) == 2 and all(map(torch.equal, parts, want))


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors:UserWarning")
def test_a_transformer_encoder_s_nested_outputs_are_saved(tmp_path: Path) -> None:
    """Its fast path (eval, a padding mask) hands nested tensors between layers."""
    torch.manual_seed(0)
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, 32, batch_first=True),
                                num_layers=2).eval()
    x = torch.randn(2, 5, 16)
    mask = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
    seen: dict[str, torch.Tensor] = {}  # the oracle: what torch's own hooks see
    handles = [layer.register_forward_hook(
        lambda m, i, out, name=name: seen.__setitem__(name, out.clone()))
        for name, layer in (("layers.0", enc.layers[0]), ("layers.1", enc.layers[1]))]
    with torch.no_grad():
        enc(x, src_key_padding_mask=mask)
    for handle in handles:
        handle.remove()
    acts = hookscope.capture(enc, x, kwargs={"src_key_padding_mask": mask},
                             select="layers.*", save_to=tmp_path / "c")
    assert list(acts) == ["layers.0", "layers.1"]
    for name, want in seen.items():
        assert want.is_nested and acts[name].is_nested
        for got_part, want_part in zip(acts[name].unbind(), want.unbind(), strict=True):
            assert torch.equal(got_part, want_part)


def test_dict_keys_a_tuple_and_the_string_of_its_repr_are_each_read_back(
    tmp_path: Path,
) -> None:
    """``{(1, 2): a, "(1, 2)": b}``: both values were stored under one tensor name and
    the disk gave ``b`` for both keys."""

    class Keys(nn.Module):
        def forward(self, x: torch.Tensor) -> dict[Any, torch.Tensor]:
            return {(1, 2): x, "(1, 2)": x + 1, ("(1, 2)",): x + 2, 1: x + 3, "1": x + 4}

    x = torch.zeros(2)
    acts = hookscope.capture(nn.Sequential(Keys()), x, select="0", save_to=tmp_path / "c")
    back = acts["0"]
    want = {(1, 2): x, "(1, 2)": x + 1, ("(1, 2)",): x + 2, 1: x + 3, "1": x + 4}
    assert list(back) == list(want)
    for key, value in want.items():
        assert torch.equal(back[key], value), key

    class NaNKeys(nn.Module):  # two keys that are two NaNs: saved alike, so refused
        def forward(self, x: torch.Tensor) -> dict[float, torch.Tensor]:
            return {float("nan"): x, float("nan"): x + 1}

    with pytest.raises(hookscope.ProbeError, match="two NaN keys"):
        hookscope.capture(nn.Sequential(NaNKeys()), x, select="0", save_to=tmp_path / "n")


# NB: torch deprecates quantized tensors once per process (TORCH_WARN_ONCE), so which
# test sees the warning depends on the order: it is the test model's, not hookscope's
@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor, torch.quantize_per_channel")
@pytest.mark.parametrize("per_channel", [False, True])
def test_a_quantized_output_is_saved_dequantized_and_patched_back_quantized(
    per_channel: bool, tmp_path: Path
) -> None:
    """safetensors holds no quantized dtype: saving raised a bare KeyError (quint8).
    The oracles: ``dequantize()`` of the module's own output, and that output itself
    (integer values, scheme and parameters) for a patch from the saved capture."""

    class Quantize(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if per_channel:
                return torch.quantize_per_channel(
                    x, torch.tensor([0.1, 0.2, 0.05]), torch.tensor([0, 3, 1]), 1,
                    torch.quint8)
            return torch.quantize_per_tensor(x, 0.1, 2, torch.quint8)

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q = Quantize()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.q(x)

    net, clean_x, x = Net(), torch.randn(2, 3), torch.randn(2, 3)
    expected = net(clean_x)
    stored = hookscope.capture(net, clean_x, select="q", save_to=tmp_path / "q")
    assert torch.equal(stored["q"], expected.dequantize())
    for source in (stored, hookscope.capture(net, clean_x, select="q")):  # disk, memory
        with hookscope.patch(net, {"q": hookscope.patches.replace_with(source)}):
            got = net(x)
        assert got.is_quantized and got.qscheme() == expected.qscheme()
        assert torch.equal(got.int_repr(), expected.int_repr())
        assert torch.equal(got.dequantize(), expected.dequantize())
