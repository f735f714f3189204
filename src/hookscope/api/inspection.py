"""``hookscope.inspect``: a model's static structure, which prints as the structure table.

Where it sits: an API-layer module beside :mod:`hookscope.api.tracing`. The walk itself is
``core/model/structure.py`` (no forward pass, no hooks); core does not import the render
layer, so the table that ``print(hookscope.inspect(model))`` shows is registered by
``hookscope.render`` when it is imported, which this module does. ``hookscope.inspect``
and ``hookscope.ModelInfo`` resolve through here, as ``hookscope.Trace`` resolves
through :mod:`hookscope.api.tracing`.
"""

from __future__ import annotations

import hookscope.render  # noqa: F401  (registers how a ModelInfo prints)
from hookscope.core.model.structure import ModelInfo, inspect

__all__ = ["ModelInfo", "inspect"]
