"""Importing sgt_core before torch puts MKL in its strict reproducible mode, in this process and its children."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import sgt_core  # noqa: F401  (sets MKL_CBWR in this process's environment, which children inherit)

MKL_CBWR_AUTO_STRICT = 2 | 0x10000  # mkl_service.h: MKL_CBWR_AUTO | MKL_CBWR_STRICT
MKL_MODE = """
import ctypes, pathlib, sys
{imports}
library = ctypes.CDLL(str(pathlib.Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))
if not hasattr(library, "mkl_serv_cbwr_get"):
    sys.exit(3)  # a torch without MKL
print(library.mkl_serv_cbwr_get(ctypes.c_int(-1)))
"""
WITHOUT_SETTING = {name: value for name, value in os.environ.items() if name != "MKL_CBWR"}


def mkl_mode(imports: str, environment: dict[str, str] | None = None) -> int:
    """The MKL mode a fresh Python process reports after `imports`."""
    result = subprocess.run([sys.executable, "-c", MKL_MODE.format(imports=imports)], check=False,
                            capture_output=True, text=True, env=environment)
    if result.returncode == 3:
        pytest.skip("this torch build has no MKL")
    assert result.returncode == 0, result.stderr
    return int(result.stdout)


def test_sgt_core_sets_mkl_strict_mode_before_torch_loads():
    assert mkl_mode("import torch", WITHOUT_SETTING) != MKL_CBWR_AUTO_STRICT  # not MKL's default
    assert mkl_mode("import sgt_core, torch", WITHOUT_SETTING) == MKL_CBWR_AUTO_STRICT


def test_a_stage_process_inherits_it():
    if os.environ["MKL_CBWR"] != "AUTO,STRICT":
        pytest.skip(f"MKL_CBWR={os.environ['MKL_CBWR']} was set before sgt_core was imported, and wins")
    assert mkl_mode("import torch") == MKL_CBWR_AUTO_STRICT
