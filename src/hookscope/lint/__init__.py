"""Model-definition lint: the bugs that make a custom model silently wrong.

``hookscope.lint(model, *inputs)`` runs the registered rules (``rules.py``, loaded by
``catalog.py``; the
built-in ones in ``checks/``, one module per family) over the model's structure and,
when inputs are given, over one forward pass, and returns a :class:`LintReport` of
:class:`Finding` records (``findings.py``). ``runner.py`` drives a run, ``context.py``
holds what rules read, ``locate.py`` the line each finding points at (with
``source.py``, where an attribute is assigned, and ``writes.py``, where it is frozen or
its values written), ``suppress.py`` handles ``select=``/``ignore=``, ``report.py``
renders text.

``hookscope.lint`` is this package, and the package is callable:
``hookscope.lint(model)`` runs :func:`hookscope.lint.runner.lint`. (A function and a
subpackage cannot share the name ``hookscope.lint``: importing any submodule binds the
package to it. So the name is always the package, and calling it is the function.)
``from hookscope.lint import lint`` gives the same callable package.
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

from hookscope.lint.catalog import get_rule, load_rules
from hookscope.lint.findings import Finding, Hit, LintReport, Severity
from hookscope.lint.rules import RULES, Needs, Rule, register_rule
from hookscope.lint.runner import lint as _lint

__all__ = [
    "RULES",
    "Finding",
    "Hit",
    "LintReport",
    "Needs",
    "Rule",
    "Severity",
    "get_rule",
    "lint",
    "load_rules",
    "register_rule",
]


class _CallableModule(types.ModuleType):
    """``hookscope.lint`` is this package or the function, both callable alike."""

    def __call__(self, model: Any, *inputs: Any, **options: Any) -> LintReport:
        return _lint(model, *inputs, **options)

    __call__.__doc__ = _lint.__doc__


sys.modules[__name__].__class__ = _CallableModule
if TYPE_CHECKING:
    from hookscope.lint.runner import lint
else:
    lint = sys.modules[__name__]  # ``hookscope.lint`` resolves through this name
