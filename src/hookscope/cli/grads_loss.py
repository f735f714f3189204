"""The loss ``hookscope grads`` trains on: the one a user of that kind of model would use.

Where it sits: ``cli/grads_training.py`` runs the steps; after each step's forward it
hands the output here. :func:`choose_loss` decides once, from the first step's output
and ``--loss``, which loss the run uses (or refuses the choice, naming the output's
shape); :meth:`Loss.compute` then computes it for every step, drawing what it needs
(labels, a target) from that step's generator, after the step's inputs:

- ``ce``: a classifier's ``[B, C]`` output (a tensor, or the ``logits`` of a
  transformers output or a named tuple): ``F.cross_entropy`` on random labels in
  ``[0, C)``; per token for the ``[B, T, C]`` ``logits`` of a model output that is not
  a causal LM's (masked LM, seq2seq LM, token classification), as their own losses are;
  the auxiliary classifiers of a named tuple (GoogLeNet's ``aux_logits1``/``2``,
  Inception's ``aux_logits``) add 0.3 times theirs on the same labels, as GoogLeNet was
  trained (without it they get no gradient at all); per pixel for the ``[B, C, H, W]``
  ``out`` of a torchvision segmentation model, plus 0.5 times its ``aux`` head's, as
  torchvision's reference training script computes it;
- ``lm``: a causal language model's ``[B, T, V]`` logits: the next-token cross-entropy
  on the input ids (``logits[:, :-1]`` against ``input_ids[:, 1:]``), as transformers
  computes it when given ``labels=input_ids``;
- ``model``: an output that holds its own ``loss``: that loss;
- ``mse``: ``F.mse_loss`` of the main output (``logits``, ``last_hidden_state``; else of
  each floating output, summed) to a random N(0, 1) target of its shape;
- ``sum``: the sum of the floating outputs (no training signal; their raw gradients).

Half-precision outputs are cast to float32 for the loss, as mixed-precision loops do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from hookscope.errors import SpecError

__all__ = ["Loss", "choose_loss", "floating_outputs", "input_ids"]

_CAUSAL_SUFFIXES = ("ForCausalLM", "LMHeadModel")

#: The weight of an auxiliary classifier's loss: GoogLeNet's paper (its named tuple's
#: fields), torchvision's segmentation reference (the ``aux`` of an ``out`` mapping).
AUX_WEIGHTS = {"tuple": 0.3, "segmentation": 0.5}


@dataclass(frozen=True)
class Loss:
    """The loss of a run.

    Attributes:
        kind: ``"ce"``, ``"lm"``, ``"model"``, ``"mse"`` or ``"sum"``.
        description: what it is, for the caption (``cross-entropy on random labels
            (10 classes)``).
    """

    kind: str
    description: str

    def compute(self, out: Any, ids: torch.Tensor | None, generator: torch.Generator) -> Any:
        """This step's loss of the output ``out`` (``ids``: the input ids, for ``lm``)."""
        if self.kind == "model":
            return _own_loss(out)
        if self.kind == "ce":
            return _cross_entropy(out, generator)
        if self.kind == "lm":
            logits = _float(_main_output(out))
            assert ids is not None
            return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                   ids[:, 1:].reshape(-1).to(logits.device))
        if self.kind == "sum":
            return torch.stack([t.sum() for t in floating_outputs(out)]).sum()
        roots = _regressed(out)
        targets = [torch.randn(t.shape, generator=generator).to(t.device) for t in roots]
        return torch.stack([F.mse_loss(_float(t), y) for t, y in zip(roots, targets,
                                                                     strict=True)]).sum()


def choose_loss(choice: str, model: nn.Module, out: Any, ids: torch.Tensor | None) -> Loss:
    """The loss ``choice`` (``--loss``: auto, ce, lm, mse or sum) for ``model``'s output
    ``out`` (``ids``: its input ids, if any).

    Raises:
        SpecError: the chosen loss does not apply to this output (it names the shape),
            or no floating output requires grad.
    """
    if not floating_outputs(out):
        raise SpecError("no floating output of the model requires grad; grads needs a model "
                        "with trainable parameters")
    main = _main_output(out)
    if choice == "auto":
        if _own_loss(out) is not None:
            return _model_loss()
        if _is_causal_lm(model) and _lm_problem(main, ids) is None:
            return _lm_loss(main)
        if _ce_problem(main, out) is None:
            return _ce_loss(main, out)
        return _mse_loss(out)
    if choice == "ce":
        problem = _ce_problem(main, out)
        if problem is not None:
            raise SpecError(f"--loss ce needs a classifier's [batch, classes] output or the "
                            f"[batch, tokens, classes] logits of a model output, but "
                            f"{problem}; use --loss mse or --loss auto")
        return _ce_loss(main, out)
    if choice == "lm":
        problem = _lm_problem(main, ids)
        if problem is not None:
            raise SpecError(f"--loss lm needs a language model's [batch, tokens, vocabulary] "
                            f"logits and its input_ids, but {problem}; use --loss auto")
        return _lm_loss(main)
    return _mse_loss(out) if choice == "mse" else Loss("sum", "sum of the outputs")


def floating_outputs(out: Any) -> list[torch.Tensor]:
    """The floating tensors of ``out`` that require grad, in pytree order."""
    from hookscope.core.records.tensor_paths import iter_tensors

    return [t for _, t in iter_tensors(out, "out") if t.requires_grad and t.is_floating_point()]


def input_ids(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> torch.Tensor | None:
    """The token ids the model was called with: ``input_ids=``, or a first positional
    integer tensor."""
    ids = kwargs.get("input_ids")
    if ids is None and args and isinstance(args[0], torch.Tensor):
        ids = args[0]
    if isinstance(ids, torch.Tensor) and not (ids.is_floating_point() or ids.is_complex()):
        return ids
    return None


def _main_output(out: Any) -> torch.Tensor | None:
    """The output a loss is taken of: :func:`_logits`, else the ``[B, C, H, W]`` ``out``
    of a torchvision segmentation model's mapping."""
    logits = _logits(out)
    if logits is None and isinstance(out, Mapping):
        seg = out.get("out")
        if isinstance(seg, torch.Tensor) and seg.dim() == 4:
            return seg
    return logits


def _logits(out: Any) -> torch.Tensor | None:
    """The tensor itself, or the ``logits`` of a mapping (transformers) or a named tuple
    (torchvision's GoogLeNet and Inception in training mode add auxiliary logits)."""
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, Mapping):
        logits = out.get("logits")
    else:
        logits = getattr(out, "logits", None) if isinstance(out, tuple) else None
    return logits if isinstance(logits, torch.Tensor) else None


def _own_loss(out: Any) -> torch.Tensor | None:
    loss = out.get("loss") if isinstance(out, Mapping) else None
    if isinstance(loss, torch.Tensor) and loss.requires_grad and loss.numel() == 1:
        return loss
    return None


def _is_causal_lm(model: nn.Module) -> bool:
    return type(model).__name__.endswith(_CAUSAL_SUFFIXES)


def _shape(t: torch.Tensor | None) -> str:
    return "a tuple or mapping without logits" if t is None else f"[{', '.join(map(str, t.shape))}]"


def _ce_problem(main: torch.Tensor | None, out: Any) -> str | None:
    """Why ``main``, the main output of ``out``, is not a classifier's (``None``: it is
    one): ``[B, C]``, or ``[B, T, C]`` logits or ``[B, C, H, W]`` scores of a model
    output (a bare 3-d or 4-d tensor is more likely features than scores)."""
    if main is None or main.dim() not in (2, 3, 4) or not main.is_floating_point():
        return f"the output is {_shape(main)}"
    if main.dim() > 2 and main is out:
        return f"the output is {_shape(main)}, a tensor rather than a model output's logits"
    if main.shape[_class_dim(main)] < 2:  # one class: a loss of 0 and no gradient at all
        return f"the output is {_shape(main)}, a single score (a regression)"
    return None


def _lm_problem(main: torch.Tensor | None, ids: torch.Tensor | None) -> str | None:
    if main is None or main.dim() != 3:
        return f"the output is {_shape(main)}"
    if ids is None or ids.dim() != 2 or tuple(ids.shape) != tuple(main.shape[:2]):
        return f"the logits are {_shape(main)} and the input ids {_shape(ids)}"
    if main.shape[1] < 2:
        return "the sequence has 1 token, which has no next token; give --input 1,16"
    return None


def _ce_loss(main: torch.Tensor | None, out: Any) -> Loss:
    assert main is not None
    per = {3: " per token", 4: " per pixel"}.get(main.dim(), "")
    text = f"cross-entropy on random labels{per} ({main.shape[_class_dim(main)]} classes)"
    aux = _auxiliary(out)
    if aux:
        text += f", plus {aux[0][2]:g} x that of {' and '.join(name for name, _, _ in aux)}"
    return Loss("ce", text)


def _class_dim(scores: torch.Tensor) -> int:
    """Where the classes are: last, but dimension 1 of ``[B, C, H, W]`` scores."""
    return 1 if scores.dim() == 4 else -1


def _cross_entropy(out: Any, generator: torch.Generator) -> torch.Tensor:
    """``F.cross_entropy`` of the main output on random labels (one per row, token or
    pixel), plus the weighted losses of the auxiliary outputs on the same labels."""
    logits = _float(_main_output(out))
    if logits.dim() == 4:  # [B, C, H, W]: the classes are dimension 1
        logits = logits.movedim(1, -1)
    classes = logits.shape[-1]
    labels = torch.randint(0, classes, logits.shape[:-1], generator=generator)
    labels = labels.reshape(-1).to(logits.device)
    loss = F.cross_entropy(logits.reshape(-1, classes), labels)
    for _, aux, weight in _auxiliary(out):
        aux = _float(aux).movedim(1, -1) if aux.dim() == 4 else _float(aux)
        loss = loss + weight * F.cross_entropy(aux.reshape(-1, classes), labels)
    return loss


def _auxiliary(out: Any) -> list[tuple[str, torch.Tensor, float]]:
    """The auxiliary classifiers' outputs and weights: a named tuple's other fields of
    its ``[B, C]`` ``logits``' shape, or a segmentation mapping's ``aux``."""
    main = _main_output(out)
    if main is None:
        return []
    if isinstance(out, Mapping) and main.dim() == 4:
        named = [("aux", out.get("aux"), AUX_WEIGHTS["segmentation"])]
    else:
        fields = getattr(out, "_fields", ()) if isinstance(out, tuple) else ()
        named = [(name, getattr(out, name), AUX_WEIGHTS["tuple"]) for name in fields
                 if name != "logits" and main.dim() == 2]
    return [(name, t, w) for name, t, w in named if isinstance(t, torch.Tensor)
            and t.requires_grad and t.shape == main.shape]


def _lm_loss(main: torch.Tensor | None) -> Loss:
    assert main is not None
    return Loss("lm", f"next-token cross-entropy on the input ids (vocabulary {main.shape[2]})")


def _model_loss() -> Loss:
    return Loss("model", "the model's own loss (its output's 'loss')")


def _regressed(out: Any) -> list[torch.Tensor]:
    """What MSE is taken of: the main output (``logits``, a transformers base model's
    ``last_hidden_state``), else every floating output."""
    main = _logits(out)
    if main is None and isinstance(out, Mapping):
        main = out.get("last_hidden_state")
    if isinstance(main, torch.Tensor) and main.requires_grad and main.is_floating_point():
        return [main]
    return floating_outputs(out)


def _mse_loss(out: Any) -> Loss:
    shapes = ", ".join(_shape(t) for t in _regressed(out))
    return Loss("mse", f"MSE to a random N(0, 1) target of shape {shapes}")


def _float(t: torch.Tensor | None) -> torch.Tensor:
    assert t is not None
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t
