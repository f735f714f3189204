"""Models from the user's own code: ``path/to/file.py:factory`` and ``package.module:factory``.

Where it sits: one source of :mod:`hookscope.cli.loading`. :func:`import_file` and
:func:`import_module` import the user's code (a file as if it were the program, with
its directory on ``sys.path`` so it can import its siblings); :func:`factory` finds the
function, ``nn.Module`` class or instance named after the colon and checks that it can
be called without arguments. A transformers model that a user's factory returns gets
the same default inputs as ``transformers:NAME`` (:func:`user_loaded`).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import itertools
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

from torch import nn

from hookscope.cli.loading.common import LoadedModel, ModelSource, describe, raised
from hookscope.cli.loading.hf import transformers_loaded
from hookscope.errors import SpecError

__all__ = ["factory", "import_file", "import_module", "user_loaded"]

_module_counter = itertools.count()


def import_file(path_text: str, spec: str) -> ModuleType:
    path = Path(path_text).expanduser()
    if not path.is_file():
        raise SpecError(
            f"file {path_text!r} not found (model spec {spec!r}); "
            f"relative paths start at {os.getcwd()}"
        )
    stem = re.sub(r"\W", "_", path.stem)
    name = f"_hookscope_user_{stem}_{next(_module_counter)}"
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise SpecError(f"file {path_text!r} cannot be imported as Python; give a .py file")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    argv = sys.argv
    try:
        # the file sees itself as the program, as under `python file.py`: a script
        # that parses its arguments when imported must not read hookscope's.
        sys.argv = [str(path)]
        with _on_sys_path(str(path.resolve().parent)):
            module_spec.loader.exec_module(module)
    except (Exception, SystemExit) as e:
        del sys.modules[name]
        hint = ""
        if isinstance(e, ImportError) and "relative import" in str(e):
            hint = (
                "; the file uses relative imports: name it as a module from the directory "
                "above its package, e.g. 'package.module:factory'"
            )
        raise SpecError(f"importing {path_text!r} {raised(e)}{hint}") from e
    finally:
        sys.argv = argv
    return module


def import_module(name: str) -> ModuleType:
    try:
        with _on_sys_path(os.getcwd()):
            return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name and (name == e.name or name.startswith(e.name + ".")):
            raise SpecError(
                f"module {name!r} not found; install it, or run from the directory that "
                "holds it, or give a file path instead ('path/to/file.py:factory')"
            ) from e
        raise SpecError(f"importing module {name!r} raised {describe(e)}") from e
    except (Exception, SystemExit) as e:
        raise SpecError(f"importing module {name!r} {raised(e)}") from e


@contextlib.contextmanager
def _on_sys_path(directory: str) -> Iterator[None]:
    """Let the user's code import its sibling modules while it is being loaded."""
    added = directory not in sys.path
    if added:
        sys.path.insert(0, directory)
    try:
        yield
    finally:
        if added and directory in sys.path:
            sys.path.remove(directory)


def factory(module: ModuleType, name: str, where: str) -> Callable[[], nn.Module]:
    """The zero-argument callable that builds the model named ``name`` in ``module``."""
    if not hasattr(module, name):
        found = ", ".join(_callables(module)) or "none"
        raise SpecError(f"{where!r} has no attribute {name!r} (available callables: {found})")
    obj = getattr(module, name)
    if isinstance(obj, nn.Module):
        return lambda: obj
    if not callable(obj):
        raise SpecError(
            f"{name!r} in {where!r} is {type(obj).__name__}; expected a function, an "
            "nn.Module class or an nn.Module instance"
        )
    _check_no_arguments(obj, name, where)

    def make() -> nn.Module:
        result = obj()
        if not isinstance(result, nn.Module):
            raise SpecError(
                f"factory {name!r} in {where!r} returned {type(result).__name__}, "
                "expected a torch.nn.Module; make it return the model"
            )
        return result

    return make


def _check_no_arguments(obj: Callable[..., object], name: str, where: str) -> None:
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):  # builtins without a signature: just call them
        return
    try:
        signature.bind()
    except TypeError:
        needed = [p.name for p in signature.parameters.values() if p.default is p.empty]
        raise SpecError(
            f"factory {name!r} in {where!r} needs arguments ({', '.join(needed)}) but is "
            "called with none; give them defaults or wrap it in a function without parameters"
        ) from None


def _callables(module: ModuleType) -> list[str]:
    """Public names in ``module`` that could be a factory (at most ten)."""

    def fits(value: object) -> bool:
        if isinstance(value, nn.Module):
            return True
        if isinstance(value, type):
            return issubclass(value, nn.Module)
        return inspect.isfunction(value) and value.__module__ == module.__name__

    names = sorted(n for n, v in vars(module).items() if not n.startswith("_") and fits(v))
    return names[:10] + (["…"] if len(names) > 10 else [])


def user_loaded(model: nn.Module, spec: str, source: ModelSource) -> LoadedModel:
    config = getattr(model, "config", None)
    if config is None or not hasattr(model, "main_input_name"):
        return LoadedModel(model, spec, source)
    # A transformers model from the user's own factory: same defaults as transformers:NAME.
    return transformers_loaded(model, config, spec, source)
