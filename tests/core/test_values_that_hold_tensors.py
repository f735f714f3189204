"""Values that hold tensors are shown, not dropped (issue 14): distributions by their
parameters, numpy arrays, PackedSequence by its data, objects with tensor attributes
(torchvision's ImageList); anything else by its type name. And example inputs made
from sizes follow the model's floating dtype; a dict is not a size."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

import hookscope
from hookscope.core.records.tensor_paths import metas


def test_a_distribution_shows_its_parameters() -> None:
    dist = torch.distributions.Normal(torch.zeros(2, 3), torch.ones(2, 3))
    found = {m.path: m.shape for m in metas(dist, "out")}
    assert found["out.loc"] == (2, 3) and found["out.scale"] == (2, 3)


def test_a_numpy_array_shows_its_shape_and_dtype() -> None:
    (meta,) = metas(np.zeros((2, 4), dtype=np.float32), "out")
    assert meta.shape == (2, 4) and "float32" in meta.dtype


def test_a_packed_sequence_shows_its_data() -> None:
    packed = pack_padded_sequence(torch.randn(3, 2, 5), torch.tensor([3, 2]))
    paths = {m.path: m.shape for m in metas(packed, "out")}
    assert paths["out.data"] == tuple(packed.data.shape)


def test_an_object_with_tensor_attributes_shows_them() -> None:
    class Holder:
        def __init__(self) -> None:
            self.tensors = torch.zeros(1, 3, 8, 8)
            self.sizes = [(8, 8)]

    found = {m.path: m.shape for m in metas(Holder(), "out")}
    assert found["out.tensors"] == (1, 3, 8, 8)


def test_anything_else_shows_its_type_name() -> None:
    class Opaque:
        pass

    (meta,) = metas(Opaque(), "out")
    assert meta.dtype == "Opaque" and meta.layout == "object"


def test_input_size_follows_the_models_floating_dtype() -> None:
    model = nn.Linear(4, 2).double()
    trace = hookscope.trace(model, input_size=(3, 4), time=False, stats=False, memory=False)
    assert trace.inputs[0].dtype == "float64"


def test_a_dict_is_not_an_input_size() -> None:
    with pytest.raises(hookscope.SpecError, match="input_size must be a shape"):
        hookscope.trace(nn.Linear(2, 2), input_size={3: "a", 4: "b"})  # type: ignore[arg-type]


def test_a_file_with_relative_imports_gets_a_hint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from hookscope.cli import main

    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "layers.py").write_text("from torch import nn\nLayer = nn.Linear\n")
    (pkg / "model.py").write_text(
        "from .layers import Layer\n\ndef make():\n    return Layer(2, 2)\n"
    )
    code = main(["inspect", f"{pkg / 'model.py'}:make"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1
    assert "relative imports" in err and "'package.module:factory'" in err
