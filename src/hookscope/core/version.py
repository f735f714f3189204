"""hookscope's own version, from the installed package's metadata.

The one place it is read: ``hookscope.__version__``, ``hookscope --version``, a
trace's ``meta`` and the JSON documents all ask here. It imports neither torch nor
anything else of hookscope, so the command line can answer ``--version`` without them.
"""

from __future__ import annotations

import functools


@functools.cache
def package_version() -> str:
    """The installed hookscope's version (``"0.0.0+unknown"`` when it is not installed,
    as in a source checkout put on ``sys.path``)."""
    # imported here, not at the top: most runs never ask, and the import costs
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hookscope")
    except PackageNotFoundError:
        return "0.0.0+unknown"
