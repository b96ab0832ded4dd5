"""The type stubs shipped with the package (`_quarry.pyi`, `py.typed`)
describe the compiled module as it is: mypy's stubtest compares every
class, method, parameter and default with the module at run time."""

import os
import subprocess
import sys
from pathlib import Path

import quarry


def test_the_stubs_match_the_compiled_module(tmp_path):
    package = Path(quarry.__file__).parent
    assert (package / "py.typed").is_file()
    assert (package / "_quarry.pyi").is_file()
    done = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "quarry._quarry"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        # mypy's cache goes to the test's directory, not the source tree.
        env={**os.environ, "MYPY_CACHE_DIR": str(tmp_path / "mypy-cache")},
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_public_method_has_a_docstring_with_an_example():
    for cls in (quarry.Client, quarry.KvTable):
        for name in dir(cls):
            if name.startswith("_"):
                continue
            doc = getattr(cls, name).__doc__ or ""
            assert ">>>" in doc, f"{cls.__name__}.{name} has no example in its docstring"
    assert ">>>" in (quarry.connect.__doc__ or "")
    assert ">>>" in (quarry.ObjectInfo.__doc__ or "")
    assert ">>>" in (quarry.KvItem.__doc__ or "")
