"""The public surface: explicit, sorted, tested, free of
import side effects. Import checks run in a fresh interpreter, so nothing this test session has
imported can hide a heavy import."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from importlib.metadata import version
from pathlib import Path

import hookscope

HEAVY_OPTIONAL = ("torchvision", "transformers", "pandas", "matplotlib", "torchinfo",
                  "torchlens", "IPython")


def test_all_is_sorted() -> None:
    assert hookscope.__all__ == sorted(hookscope.__all__)
    assert len(set(hookscope.__all__)) == len(hookscope.__all__)


def _plain_module(value: object) -> bool:
    """A submodule bound by an import; ``hookscope.lint`` is a module and callable."""
    return isinstance(value, types.ModuleType) and not callable(value)


def test_all_equals_the_public_namespace() -> None:
    public = {
        name for name in dir(hookscope)
        if not name.startswith("_") and not _plain_module(getattr(hookscope, name))
    }
    assert public == set(hookscope.__all__) - {"__version__"}


def test_every_exported_name_resolves() -> None:
    for name in hookscope.__all__:
        assert getattr(hookscope, name) is not None, name


def test_version_comes_from_package_metadata() -> None:
    assert hookscope.__version__ == version("hookscope")


def test_every_document_names_the_version_of_the_package_metadata() -> None:
    import torch
    from torch import nn

    from hookscope.core.records.structure_json import structure_to_dict

    model = nn.Sequential(nn.Linear(2, 2))
    trace = hookscope.trace(model, torch.ones(1, 2))
    expected = version("hookscope")
    assert trace.meta["hookscope_version"] == expected
    assert json.loads(trace.to_json())["hookscope_version"] == expected
    assert structure_to_dict(hookscope.inspect(model))["hookscope_version"] == expected


def _fresh(code: str, cwd: Path) -> dict[str, object]:
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


IMPORT_PROBE = """
import json, sys
import torch, torch.nn.modules.module as mm
from torch.utils._python_dispatch import _get_current_dispatch_mode
def registries():
    return {k: len(v) for k, v in vars(mm).items()
            if k.startswith("_global") and hasattr(v, "__len__")}
before = registries()
import hookscope
for name in hookscope.__all__:  # names load lazily: load every module behind them
    getattr(hookscope, name)
after = registries()
print(json.dumps({
    "heavy": sorted(m for m in %r if m in sys.modules),
    "global_hooks_before": before,
    "global_hooks_after": after,
    "dispatch_mode": repr(_get_current_dispatch_mode()),
    "grad_enabled": torch.is_grad_enabled(),
}))
"""


def test_import_is_free_of_side_effects(tmp_path: Path) -> None:
    found = _fresh(IMPORT_PROBE % (HEAVY_OPTIONAL,), tmp_path)
    assert found["heavy"] == []
    after = found["global_hooks_after"]
    assert isinstance(after, dict) and after  # the probe did find torch's registries
    assert after == found["global_hooks_before"]
    assert all(n == 0 for n in after.values()), after
    assert found["dispatch_mode"] == "None"
    assert found["grad_enabled"] is True
    assert list(tmp_path.iterdir()) == []  # nothing written to the working directory


def test_import_and_the_command_line_parser_do_not_import_torch(tmp_path: Path) -> None:
    """``hookscope --help`` and a bad option answer without loading torch (a second)."""
    code = (
        "import json, sys\n"
        "import hookscope, hookscope.cli.app\n"
        "print(json.dumps({'torch': 'torch' in sys.modules}))\n"
    )
    assert _fresh(code, tmp_path) == {"torch": False}


def test_using_the_api_imports_no_optional_dependency(tmp_path: Path) -> None:
    code = (
        "import json, sys, torch, hookscope\n"
        "m = torch.nn.Sequential(torch.nn.Linear(2, 2))\n"
        "hookscope.inspect(m); hookscope.summary(m, torch.randn(1, 2))\n"
        "t = hookscope.trace(m, torch.randn(1, 2)); t.to_json(); str(t)\n"
        f"print(json.dumps(sorted(x for x in {HEAVY_OPTIONAL!r} if x in sys.modules)))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=tmp_path, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []
