"""Cache keys: each stage's code is its whole sgt_core import closure, and its kernel backend counts too."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from sgt_core import code_version, pipeline
from sgt_core.config import compose_config
from sgt_core.kernels import library
from tests.conftest import REPO_ROOT, TINY_OVERRIDES

# Run in a fresh interpreter: import only the stage function's module, run the stage, and print which
# sgt_core modules are loaded by then (the test process has them all loaded already).
STAGE_CHILD = """
import importlib, json, sys
from pathlib import Path
cfg = json.loads(Path(sys.argv[1]).read_text())
module, function, inputs, out_dir = sys.argv[2], sys.argv[3], json.loads(sys.argv[4]), Path(sys.argv[5])
run = getattr(importlib.import_module(module), function)
run(cfg, {name: Path(folder) for name, folder in inputs.items()}, out_dir)
print(json.dumps(sorted(name for name in sys.modules if name.partition(".")[0] == "sgt_core")))
"""


def stage(name: str) -> pipeline.Stage:
    """The pipeline's stage of that name."""
    return pipeline.STAGE_BY_NAME[name]


def upstream_closure(name: str) -> set[str]:
    """The stage and every stage it depends on, directly or not."""
    names = {name}
    for upstream in stage(name).upstream:
        names |= upstream_closure(upstream)
    return names


def copy_sources(target: Path) -> Path:
    """A copy of the sgt_core sources (no caches) at target/sgt_core, the root to hash instead of the real one."""
    root = target / "sgt_core"
    shutil.copytree(code_version.PACKAGE_ROOT, root, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    return root


@pytest.fixture
def fresh_kernels():
    """Forgets which kernels this process loaded, before and after, so a changed environment is seen."""
    library.cpu_kernels.cache_clear()
    yield
    library.cpu_kernels.cache_clear()


@pytest.mark.parametrize("name", ["estimate", "train"])
def test_model_stages_cover_the_optimizer_and_the_c_kernels(name):
    files = stage(name).code_files()
    assert "sgt_core/optim.py" in files  # missing from the hand-kept lists before
    assert {"sgt_core/kernels/edge_attention.cpp", "sgt_core/kernels/common.h"} <= set(files)  # compiled at run time
    assert "sgt_core/models/spexphormer.py" in files
    assert f"sgt_core/{name}/stage.py" in files and "sgt_core/__init__.py" in files


def test_the_preprocess_closure_leaves_out_the_later_stages():
    files = stage("preprocess").code_files()
    assert "sgt_core/preprocess/stage.py" in files and "sgt_core/data/load.py" in files
    for later in ("sgt_core/optim.py", "sgt_core/estimate/stage.py", "sgt_core/export/stage.py",
                  "sgt_core/train/stage.py"):
        assert later not in files


def test_the_preprocess_closure_leaves_out_the_networks_and_samplers():
    # so that editing a model or a sampler does not recompute every graph (preprocess's degree histograms
    # live in sgt_core/preprocess/degrees.py, away from the sampling package)
    leaked = [path for path in stage("preprocess").code_files()
              if path.startswith(("sgt_core/models/", "sgt_core/sampling/", "sgt_core/kernels/"))]
    assert not leaked


def test_relative_and_lazy_imports_count(tmp_path):
    root = tmp_path / "sgt_core"
    (root / "pkg").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "pkg" / "__init__.py").write_text("from . import sub\n")
    (root / "pkg" / "sub.py").write_text("def later():\n    from ..lazy import thing\n")
    (root / "lazy.py").write_text("from sgt_core import other\nthing = 1\n")
    (root / "other.py").write_text("import sgt_core.pkg.sub\n")
    (root / "unused.py").write_text("")
    assert code_version.module_closure("sgt_core.pkg.sub", root) == (
        "sgt_core", "sgt_core.lazy", "sgt_core.other", "sgt_core.pkg", "sgt_core.pkg.sub")


def test_editing_any_module_changes_its_stages_keys_and_the_downstream_ones_only(tmp_path):
    cfg = compose_config(TINY_OVERRIDES)
    original = pipeline.stage_keys(cfg)
    root = copy_sources(tmp_path)
    # The same sources elsewhere give the same keys: paths enter relative to the folder holding sgt_core.
    assert pipeline.stage_keys(cfg, root=root) == original
    for relative in sorted({path for each in pipeline.STAGES for path in each.code_files()}):
        path = root.parent / relative
        content = path.read_bytes()
        path.write_bytes(content + (b"\n/* edited */\n" if path.suffix in (".cpp", ".h") else b"\n# edited\n"))
        code_version.code_version.cache_clear()  # the hashes are cached per process; the closures stay valid
        keys = pipeline.stage_keys(cfg, root=root)
        path.write_bytes(content)
        code_version.code_version.cache_clear()
        for each in pipeline.STAGES:
            uses = any(relative in stage(name).code_files() for name in upstream_closure(each.name))
            assert (keys[each.name] != original[each.name]) == uses, (relative, each.name)


def test_every_sgt_core_module_a_stage_loads_is_in_its_closure(tmp_path):
    cfg_file = tmp_path / "config.json"
    cfg_file.write_text(json.dumps(compose_config(TINY_OVERRIDES)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    outputs: dict[str, Path] = {}
    for each in pipeline.STAGES:  # in pipeline order, each child reading the earlier children's outputs
        outputs[each.name] = tmp_path / each.name
        outputs[each.name].mkdir()
        inputs = {name: str(outputs[name]) for name in each.upstream}
        completed = subprocess.run(
            [sys.executable, "-c", STAGE_CHILD, str(cfg_file), each.module, each.function.partition(":")[2],
             json.dumps(inputs), str(outputs[each.name])],
            cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=False)
        assert completed.returncode == 0, completed.stderr[-3000:]
        loaded = set(json.loads(completed.stdout.strip().splitlines()[-1]))
        assert each.module in loaded
        assert loaded <= set(code_version.module_closure(each.module)), (each.name, loaded - set(
            code_version.module_closure(each.module)))


def _compiled_kernels_config(monkeypatch) -> dict:
    """A CPU config, with the portable compiled kernels in use (skips where they cannot be built)."""
    monkeypatch.delenv(library.SWITCH, raising=False)
    monkeypatch.delenv(library.NATIVE, raising=False)
    if library.cpu_kernels() is None:
        pytest.skip("the compiled kernels cannot be built here (no C++ compiler)")
    return compose_config([*TINY_OVERRIDES, "train.device=cpu"])


def test_switching_the_compiled_kernels_off_changes_the_estimate_and_train_keys_only(monkeypatch, fresh_kernels):
    cfg = _compiled_kernels_config(monkeypatch)
    compiled = pipeline.stage_keys(cfg)
    monkeypatch.setenv(library.SWITCH, "0")
    library.cpu_kernels.cache_clear()
    plain = pipeline.stage_keys(cfg)
    assert plain["preprocess"] == compiled["preprocess"]
    assert plain["estimate"] != compiled["estimate"]
    assert plain["train"] != compiled["train"]
    assert pipeline.stage_material(stage("estimate"), cfg, plain)["kernels"] == "torch"
    # export's key follows estimate's, but given the same upstream keys its own material is unchanged
    export_material = pipeline.stage_material(stage("export"), cfg, compiled)
    monkeypatch.delenv(library.SWITCH)
    library.cpu_kernels.cache_clear()
    assert pipeline.stage_material(stage("export"), cfg, compiled) == export_material


def test_a_native_build_of_the_kernels_changes_the_estimate_and_train_keys_only(monkeypatch, fresh_kernels):
    """SGT_KERNELS_NATIVE=1 builds for this CPU, whose wider vector sums round differently."""
    cfg = _compiled_kernels_config(monkeypatch)
    portable = pipeline.stage_keys(cfg)
    monkeypatch.setenv(library.NATIVE, "1")
    native = pipeline.stage_keys(cfg)
    assert native["preprocess"] == portable["preprocess"]
    assert native["estimate"] != portable["estimate"] and native["train"] != portable["train"]
    assert pipeline.stage_material(stage("train"), cfg, native)["kernels"] == "compiled-native"


def test_training_on_cuda_keys_the_cuda_backend(monkeypatch, fresh_kernels):
    keys = {}
    for device, cuda_present in (("cpu", False), ("auto", False), ("auto", True), ("cuda", False)):
        monkeypatch.setattr("torch.cuda.is_available", lambda present=cuda_present: present)
        cfg = compose_config([*TINY_OVERRIDES, f"train.device={device}"])
        material = pipeline.stage_material(stage("train"), cfg, {"preprocess": "p", "export": "e"})
        keys[device, cuda_present] = material["kernels"]
        assert pipeline.stage_material(stage("estimate"), cfg, {"preprocess": "p"})["kernels"] != "cuda"
    assert keys["auto", True] == keys["cuda", False] == "cuda"
    assert keys["cpu", False] == keys["auto", False] != "cuda"



def test_a_parse_spoiled_by_another_thread_is_parsed_again(monkeypatch, tmp_path):
    # CPython 3.11 shares ast.parse's depth counter between threads (gh-106905): a pool worker's stage once
    # failed with this SystemError while another thread formatted a traceback (3.11's tracebacks parse lines).
    source = tmp_path / "module.py"
    source.write_text("import sgt_core.metrics\n")
    real_parse, calls = ast.parse, []

    def spoiled_twice(*args, **kwargs):
        calls.append(args)
        if len(calls) <= 2:
            raise SystemError("AST constructor recursion depth mismatch (before=57, after=76)")
        return real_parse(*args, **kwargs)

    monkeypatch.setattr(code_version, "ast", types.SimpleNamespace(**{**vars(ast), "parse": spoiled_twice}))
    assert code_version.imported_names(source, "sgt_core.module") == {"sgt_core.metrics"}
    assert len(calls) == 3


def test_other_errors_of_the_parser_are_raised(monkeypatch, tmp_path):
    source = tmp_path / "module.py"
    source.write_text("import sgt_core.metrics\n")

    def broken(*args, **kwargs):
        raise SystemError("some other interpreter error")

    monkeypatch.setattr(code_version, "ast", types.SimpleNamespace(**{**vars(ast), "parse": broken}))
    with pytest.raises(SystemError, match="some other"):
        code_version.imported_names(source, "sgt_core.module")
    source.write_text("import (\n")
    monkeypatch.undo()
    with pytest.raises(SyntaxError, match="module.py"):
        code_version.imported_names(source, "sgt_core.module")
