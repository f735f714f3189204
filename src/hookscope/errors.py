"""Every exception hookscope raises on purpose.

The tree::

    HookscopeError                  base of everything below; catch this to catch all
    ├── SpecError (ValueError)      a bad model spec, input spec, selector or option from the user
    ├── ModelRunError (RuntimeError) the user's model raised while hookscope observed it;
    │                                carries the partial ``Trace`` and the failing call
    └── RenderError (ValueError)    a trace could not be rendered or parsed (unknown column,
                                    unknown format, JSON of another schema version)

A ``SpecError`` message is one line that names the offending value and says how to fix
it; the command line prints exactly that line and exits with code 2.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hookscope.core.records import Trace


class HookscopeError(Exception):
    """Base class of every error hookscope raises on purpose."""


class SpecError(HookscopeError, ValueError):
    """A model spec, input spec, selector or option given by the user is wrong.

    The message says what was given, what was expected and how to fix it.
    """


class RenderError(HookscopeError, ValueError):
    """A trace could not be rendered, exported or parsed."""


class ModelRunError(HookscopeError, RuntimeError):
    """The observed model raised an exception.

    Attributes:
        trace: the partial trace recorded up to the failure (calls that finished, and
            the failing call with its inputs).
        path: fully qualified name of the innermost module whose call raised
            (``""`` for the root module, ``None`` when the failure was outside any module).
    """

    def __init__(self, message: str, *, trace: Trace, path: str | None) -> None:
        super().__init__(message)
        self.trace = trace
        self.path = path
