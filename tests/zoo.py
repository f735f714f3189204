"""A zoo of tiny models, one class per pitfall, each small enough to read in one look.

Every class takes no constructor argument, names its pitfall in its docstring and has
``example_inputs() -> (args, kwargs)`` returning fresh tensors made from a private
generator (torch's global RNG is not touched), so a test can call it any number of
times and get equal inputs. Class attributes tell generic tests what to expect:

- ``RAISES``: the forward raises on purpose (``RaisingModel``).
- ``MUTATES_STATE``: the model's own forward changes its state (BatchNorm running stats
  in train mode, lazy parameters materialising). For these, "hookscope leaves the state
  unchanged" means: the state after an observed run equals the state of an identical
  twin after the same unobserved run. Hooks and object identities must still be
  exactly those from before the run.
- ``FAILING_PATH``: for a raising model, the path of the submodule that raises.

Lazy modules (``LazyModel``): the first forward materialises ``UninitializedParameter``
s, changes the module's class from ``LazyLinear`` to ``Linear`` and removes the lazy
module's own initialisation pre-hook. A run hookscope makes for its caller (``trace``,
``summary``, ``capture``, ``lint``) puts all of that back: the model stays lazy. In a
``Tracer`` block the forward is the user's, and an observed first forward does exactly
what an unobserved one does (same shapes, same values drawn from the same RNG state,
same class, same remaining hooks). Tests that only care about steady-state behaviour
call :func:`materialize` first.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

Inputs = tuple[tuple[Any, ...], dict[str, Any]]


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=_gen(seed))


class ZooModel(nn.Module):
    """Base of the zoo models: metadata defaults and the input factory."""

    RAISES: ClassVar[bool] = False
    MUTATES_STATE: ClassVar[bool] = False
    FAILING_PATH: ClassVar[str | None] = None

    @classmethod
    def example_inputs(cls) -> Inputs:
        return (_randn(2, 4),), {}


class SharedModule(ZooModel):
    """Pitfall: one ``nn.Linear`` registered under two names (``fc`` and ``alias``) and
    called twice. It is one module (``named_modules`` lists it once, as ``fc``) with two
    calls (``call_index`` 0 and 1); its parameters are counted once."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.alias = self.fc
        self.head = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.alias(torch.relu(self.fc(x)))))


class TiedWeights(ZooModel):
    """Pitfall: the embedding and the output head share one weight tensor (as GPT-2's
    ``wte``/``lm_head``); it must be counted once and reported as tied."""

    VOCAB: ClassVar[int] = 11
    DIM: ClassVar[int] = 6

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(self.VOCAB, self.DIM)
        self.norm = nn.LayerNorm(self.DIM)
        self.head = nn.Linear(self.DIM, self.VOCAB, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.embed(ids)))

    @classmethod
    def example_inputs(cls) -> Inputs:
        return (torch.randint(0, cls.VOCAB, (2, 5), generator=_gen()),), {}


class MultiCall(ZooModel):
    """Pitfall: one module called three times in one forward: three calls with
    ``call_index`` 0, 1, 2, all children of the root call."""

    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(3):
            x = torch.tanh(self.block(x))
        return x


class DictOutput(ZooModel):
    """Pitfall: the model returns a dict; tensors are found as ``out["logits"]``,
    ``out["hidden"]``, and a non-tensor value (``out["n"]``) is skipped."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(4, 5)
        self.head = nn.Linear(5, 2)

    def forward(self, x: torch.Tensor) -> dict[str, Any]:
        h = self.body(x)
        return {"logits": self.head(h), "hidden": h, "n": 3}


class Pair(NamedTuple):
    first: torch.Tensor
    second: torch.Tensor


class NamedTupleOutput(ZooModel):
    """Pitfall: the model (and a submodule) return a namedtuple; tensors are found with
    pytree paths (``out[0]``, ``out[1]``)."""

    def __init__(self) -> None:
        super().__init__()
        self.split = _SplitPair()
        self.fc = nn.Linear(2, 3)

    def forward(self, x: torch.Tensor) -> Pair:
        pair = self.split(x)
        return Pair(self.fc(pair.first), pair.second)


class _SplitPair(nn.Module):
    def forward(self, x: torch.Tensor) -> Pair:
        a, b = x.split(2, dim=-1)
        return Pair(a, b * 2)


@dataclasses.dataclass
class Result:
    logits: torch.Tensor
    extras: tuple[torch.Tensor, ...]
    label: str = "result"


class DataclassOutput(ZooModel):
    """Pitfall: the model returns a plain dataclass (not registered with pytree) whose
    fields hold a tensor and a tuple of tensors: ``out.logits``, ``out.extras[0]``."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> Result:
        y = self.fc(x)
        return Result(logits=y, extras=(y.sum(-1), x.mean(0)))


class _Sink(nn.Module):
    """Returns None (a side-effect-free logging module, say)."""

    def forward(self, x: torch.Tensor) -> None:
        return None


class NoneOutput(ZooModel):
    """Pitfall: a submodule returns ``None`` and the model returns ``(tensor, None)``;
    the ``None`` has no tensor and must not crash any probe."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 2)
        self.sink = _Sink()

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, None]:
        y = self.fc(x)
        return y, self.sink(y)


class KwargsOnlyForward(ZooModel):
    """Pitfall: ``forward(self, *, x, mask=None)`` takes keyword-only inputs, so the
    inputs are in ``kwargs["x"]``/``kwargs["mask"]`` and ``args`` is empty."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, *, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        y = self.fc(x)
        return y if mask is None else y.masked_fill(~mask, 0.0)

    @classmethod
    def example_inputs(cls) -> Inputs:
        x = _randn(2, 4)
        mask = torch.rand(2, 4, generator=_gen(1)) > 0.5
        return (), {"x": x, "mask": mask}


class LSTMModel(ZooModel):
    """Pitfall: ``nn.LSTM`` returns ``(out, (h, c))``: nested tuple outputs
    (``out[0]``, ``out[1][0]``, ``out[1][1]``) and a module with flattened weights."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(4, 6, num_layers=1, batch_first=True)
        self.head = nn.Linear(6, 2)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        out, (h, c) = self.lstm(x)
        return self.head(out), (h, c)

    @classmethod
    def example_inputs(cls) -> Inputs:
        return (_randn(2, 3, 4),), {}


class LazyModel(ZooModel):
    """Pitfall: ``nn.LazyLinear`` has ``UninitializedParameter`` s until the first
    forward, which materialises them, turns the module into an ``nn.Linear`` and removes
    the lazy module's own pre-hook (see the module docstring for what "unchanged" means)."""

    MUTATES_STATE = True

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 5)
        self.lazy = nn.LazyLinear(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lazy(torch.relu(self.fc(x)))


class InplaceReLU(ZooModel):
    """Pitfall: ``nn.ReLU(inplace=True)`` after a ``Linear`` overwrites the Linear's
    output tensor after the Linear's hook saw it (and bumps its version counter)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 6)
        self.act = nn.ReLU(inplace=True)
        self.out = nn.Linear(6, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.act(self.fc(x)))


class RaisingModel(ZooModel):
    """Pitfall: a nested submodule raises mid-forward (a shape mismatch in
    ``block.proj``: it expects 6 features and gets 8) after ``stem`` and ``block.act``
    finished."""

    RAISES = True
    FAILING_PATH = "block.proj"

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Linear(4, 8)
        self.block = nn.Sequential()
        self.block.add_module("act", nn.ReLU())
        self.block.add_module("proj", nn.Linear(6, 2))
        self.head = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(self.stem(x)))


class FunctionalOnly(ZooModel):
    """Pitfall: no submodules; the forward only uses ``torch.nn.functional`` ops on
    parameters registered on the root, so the root is the only module call."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(_randn(5, 4, seed=3) * 0.5)
        self.bias = nn.Parameter(torch.zeros(5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(F.linear(x, self.weight, self.bias))
        return F.softmax(F.layer_norm(h, (5,)), dim=-1)


class Function_A(nn.Module):
    """x + W"""

    def __init__(self, name: str = "plus") -> None:
        super().__init__()
        self.name = name
        self.W = nn.Parameter(torch.tensor([1.0]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.W


class Function_B(nn.Module):
    """x - W1 - W2"""

    def __init__(self, name: str = "substract") -> None:
        super().__init__()
        self.name = name
        self.W1 = nn.Parameter(torch.tensor([10.0]))
        self.W2 = nn.Parameter(torch.tensor([2.0]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x - self.W1 - self.W2


class Function_C(nn.Module):
    """x * W, with the buffer ``duck``."""

    def __init__(self, name: str = "multiply") -> None:
        super().__init__()
        self.name = name
        self.W = nn.Parameter(torch.tensor([3.0]))
        self.register_buffer("duck", torch.tensor([7.0]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.W


class Function_D(nn.Module):
    """x / W"""

    def __init__(self, name: str = "divide") -> None:
        super().__init__()
        self.name = name
        self.W = nn.Parameter(torch.tensor([5.0]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / self.W


class Layer_AB(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = Function_A("plus")
        self.b = Function_B("substract")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x))


class Layer_CD(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c = Function_C("multiply")
        self.d = Function_D("divide")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.d(self.c(x))


class NestedSeeds(ZooModel):
    """Pitfall: the seeds' nested model, ``Model(ab=Layer_AB(a, b), cd=Layer_CD(c, d))``:
    a parameter two levels down (``ab.b.W1`` == 10, like ``get_parameter``) and a
    buffer (``cd.c.duck`` == 7, like ``get_buffer``)."""

    def __init__(self) -> None:
        super().__init__()
        self.ab = Layer_AB()
        self.cd = Layer_CD()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cd(self.ab(x))

    @classmethod
    def example_inputs(cls) -> Inputs:
        return (_randn(2, 2),), {}


class FrozenParams(ZooModel):
    """Pitfall: some parameters have ``requires_grad=False``: the whole ``backbone``
    and the bias of ``head``; trainable and frozen counts differ."""

    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Linear(4, 8)
        self.head = nn.Linear(8, 2)
        self.backbone.requires_grad_(False)
        self.head.bias.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.backbone(x)))


class BufferModel(ZooModel):
    """Pitfall: a persistent buffer (``mean``, in ``state_dict``), a non-persistent one
    (``scale``, not in ``state_dict``) and a ``None`` buffer slot (``unused``); buffers
    are not parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.full((4,), 0.5))
        self.register_buffer("scale", torch.arange(1.0, 5.0), persistent=False)
        self.register_buffer("unused", None)
        self.fc = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc((x - self.mean) * self.scale)


class TrainModeModel(ZooModel):
    """Pitfall: behaviour depends on ``training``: in train mode ``BatchNorm1d`` updates
    its running statistics (the forward itself changes buffers) and ``Dropout`` draws
    from torch's global RNG, so observing must not run the forward twice or consume
    random numbers."""

    MUTATES_STATE = True

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 6)
        self.bn = nn.BatchNorm1d(6)
        self.drop = nn.Dropout(0.5)
        self.out = nn.Linear(6, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.drop(self.bn(self.fc(x))))

    @classmethod
    def example_inputs(cls) -> Inputs:
        return (_randn(5, 4),), {}


class PlainListModel(ZooModel):
    """Pitfall (from the seeds): a ``Linear`` kept in a plain Python list is not
    registered as a submodule: it runs, but it is not in ``named_modules``, its
    parameters are not counted, and its work is attributed to the root's call."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = [nn.Linear(4, 4)]
        self.registered = nn.ModuleList([nn.Linear(4, 4)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.registered[0](self.layers[0](x))


ALL_ZOO: list[type[ZooModel]] = [
    SharedModule,
    TiedWeights,
    MultiCall,
    DictOutput,
    NamedTupleOutput,
    DataclassOutput,
    NoneOutput,
    KwargsOnlyForward,
    LSTMModel,
    LazyModel,
    InplaceReLU,
    RaisingModel,
    FunctionalOnly,
    NestedSeeds,
    FrozenParams,
    BufferModel,
    TrainModeModel,
    PlainListModel,
]

#: The zoo models whose forward succeeds.
RUNNING_ZOO: list[type[ZooModel]] = [cls for cls in ALL_ZOO if not cls.RAISES]


def build(cls: type[ZooModel], *, seed: int = 0) -> ZooModel:
    """A fresh instance built under a fixed seed (equal seeds give equal weights)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return cls()


def materialize(model: nn.Module) -> nn.Module:
    """Run one plain forward of a lazy zoo model so its parameters exist (no-op else)."""
    if any(isinstance(p, nn.parameter.UninitializedParameter) for p in model.parameters()):
        args, kwargs = type(model).example_inputs()  # type: ignore[attr-defined]
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            torch.manual_seed(1234)
            model(*args, **kwargs)
    return model


def run(model: nn.Module) -> Any:
    """One plain forward of a zoo model on its example inputs."""
    args, kwargs = type(model).example_inputs()  # type: ignore[attr-defined]
    return model(*args, **kwargs)
