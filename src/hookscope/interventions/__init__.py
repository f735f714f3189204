"""Interventions: capture what modules compute, and change it.

- ``capture.py``: :func:`capture` and :class:`Capture` copy chosen modules' outputs or
  inputs (a recording probe), into memory or streamed to disk (``storage.py``:
  safetensors shards + a JSON index, read back lazily by :func:`load_activations`).
- ``patch.py``: :func:`patch` / :func:`patch_inputs` replace outputs or inputs (a
  replacing probe); ``functions.py`` holds the ready-made functions
  (``hookscope.patches``).

Both run in a :class:`~hookscope.Tracer` that observes only the chosen modules; the
engine orders replacing probes before recording ones. They import only ``core``.

The package re-exports nothing: a submodule named like a function it would export
(``capture``, ``patch``) would rebind that name on import. ``hookscope`` exports the
public names from the submodules themselves.
"""
