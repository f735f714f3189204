"""Interventions: capture what modules compute, and change it.

- ``capture.py``: :func:`capture` and :class:`Capture` copy chosen modules' outputs or
  inputs, into memory or streamed to disk; ``recording.py`` holds what a capture
  records (the recording probes, the in-memory dict).
- ``storage.py``: the capture directory (safetensors shards + a JSON index), its
  names re-exported from ``storage_format.py`` (file names, a value as tensors plus
  JSON), ``storage_writer.py`` (:class:`ShardWriter`) and ``storage_reader.py``
  (:func:`load_activations`, read back lazily).
- ``patch.py``: :func:`patch` / :func:`patch_inputs` replace outputs or inputs (a
  replacing probe); ``functions.py`` gathers the ready-made functions
  (``hookscope.patches``) from ``value_patches.py`` (zero, scale, clamp, noise),
  ``activation_patching.py`` (replace_with) and ``grad_patches.py`` (scale_grad,
  clip_grad).

Both run in a :class:`~hookscope.Tracer` that observes only the chosen modules; the
engine orders replacing probes before recording ones. They import only ``core``.

The package re-exports nothing: a submodule named like a function it would export
(``capture``, ``patch``) would rebind that name on import. ``hookscope`` exports the
public names from the submodules themselves.
"""
