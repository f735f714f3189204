"""Ready-made patch functions for :func:`hookscope.patch`, as ``hookscope.patches.NAME``.

Each factory returns ``fn(module, inputs, output)``; it is applied to every tensor of a
nested output (``torch.utils._pytree``), and non-float tensors are left alone. The
backward-path ones (:func:`scale_grad`, :func:`clip_grad`) leave the forward values
bit-identical and change only the gradient that flows back through the output.

The functions live by kind, and are re-exported here:

- ``value_patches.py``: :func:`zero` (alias :func:`ablate`), :func:`scale`,
  :func:`clamp`, :func:`noise`, which change the output's values;
- ``activation_patching.py``: :func:`replace_with`, a stored value (a capture's)
  instead of the output;
- ``grad_patches.py``: :func:`scale_grad`, :func:`clip_grad`, on the backward path.
"""

from __future__ import annotations

from hookscope.interventions.activation_patching import replace_with
from hookscope.interventions.grad_patches import clip_grad, scale_grad
from hookscope.interventions.value_patches import (
    Bound,
    Index,
    ablate,
    clamp,
    noise,
    scale,
    zero,
)


class PatchFunctions:
    """The ready-made patch functions, as ``hookscope.patches.NAME``: :func:`zero`
    (alias :func:`ablate`), :func:`scale`, :func:`clamp`, :func:`noise`,
    :func:`replace_with`, :func:`scale_grad`, :func:`clip_grad`."""

    zero = staticmethod(zero)
    ablate = staticmethod(ablate)
    scale = staticmethod(scale)
    clamp = staticmethod(clamp)
    noise = staticmethod(noise)
    replace_with = staticmethod(replace_with)
    scale_grad = staticmethod(scale_grad)
    clip_grad = staticmethod(clip_grad)

    def __repr__(self) -> str:
        return "<hookscope.patches: zero, ablate, scale, clamp, noise, replace_with, " \
               "scale_grad, clip_grad>"


patches = PatchFunctions()


__all__ = [
    "Bound",
    "Index",
    "PatchFunctions",
    "ablate",
    "clamp",
    "clip_grad",
    "noise",
    "patches",
    "replace_with",
    "scale",
    "scale_grad",
    "zero",
]
