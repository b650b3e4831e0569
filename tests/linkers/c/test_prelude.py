"""tenure.linkers.c.prelude, and the cache's entries of files it lives in.

Generated sources start by including their prelude header; gcc reads its
precompiled form when it fits the build and the header's text otherwise.  The
tests check that the precompiled form is the one read in the loops' own
builds (``-Werror=invalid-pch``: gcc refuses a .gch it finds and cannot use),
that the text alone builds the same module, and that the entry holding them
keeps the cache's promises (published whole, checked, rebuilt when damaged).
"""

import dataclasses
import os
import textwrap
from pathlib import Path

import numpy as np
import pytest

import tenure as tn
from tenure.linkers.c import cache, compiler, elemwise, kernels, module, prelude, runtime
from tenure.linkers.c.cgen import HEADERS
from tenure.linkers.c.cache import CacheWarning
from tenure.linkers.c.compiler import CompileError

#: a prelude as small as a test needs, and a module that starts with it
TEXT = "#define PY_SSIZE_T_CLEAN\n#include <Python.h>\nstatic int tn_three(void) { return 3; }\n"


def module_source(name: str, text: str = TEXT) -> str:
    return prelude.include_line(text) + textwrap.dedent(f"""\
        static PyObject *three(PyObject *self, PyObject *unused)
        {{
            return PyLong_FromLong(tn_three());
        }}
        static PyMethodDef methods[] = {{{{"three", three, METH_NOARGS, ""}}, {{NULL}}}};
        static struct PyModuleDef def = {{PyModuleDef_HEAD_INIT, "{name}", NULL, -1, methods}};
        PyMODINIT_FUNC PyInit_{name}(void) {{ return PyModule_Create(&def); }}
        """)


@pytest.fixture(autouse=True)
def _private_compiledir(tmp_path):
    """Nothing here may touch another test's cache; nothing remembered from one."""
    cache._forget_loaded()
    with tn.config.change_flags(compiledir=str(tmp_path / "compiledir")):
        yield
    cache._forget_loaded()


def build_beside(files: dict, source: str, recipe, directory: Path) -> Path:
    """Build ``source`` in ``directory`` with ``files`` beside it; the binary."""
    directory.mkdir()
    for name, path in files.items():
        os.link(path, directory / name)
    (directory / "probe.c").write_text(source)
    compiler.compile_shared_library(directory / "probe.c", directory / "probe.so", recipe)
    return directory / "probe.so"


def strict(recipe):
    """``recipe``, refusing a precompiled header that it finds and cannot use."""
    return dataclasses.replace(recipe, link_args=(*recipe.link_args, "-Werror=invalid-pch"))


def test_the_loops_prelude_is_precompiled_for_their_build(cc_or_skip, tmp_path, monkeypatch):
    # Loops are keyed without their constants' values, so this process may
    # hold these from another test's cache directory: forget them, so that
    # they come from (or are built into) this one.
    monkeypatch.setattr(kernels, "_libraries", {})
    x = tn.vector("x")
    f = tn.function([x], tn.exp(x) * 3, mode=tn.Mode(linker="c"))
    assert np.allclose(f(np.arange(3.0)), np.exp(np.arange(3.0)) * 3)
    kernel = kernels.LoopKernel("", elemwise.SUPPORT_CODE, elemwise.COMPILE_FLAGS)
    text = kernels.library_prelude([kernel])
    recipe = compiler.make_recipe(elemwise.COMPILE_FLAGS)
    files = prelude.files(text, recipe)
    header = prelude.header_name(text)
    assert sorted(files) == [header, header + ".gch"]
    # the loop library the function built is the one that names that header
    built = [p for p in cache.entries_dir().glob("*/tn_loops_*.c")]
    assert built and all(p.read_text().startswith(prelude.include_line(text)) for p in built)
    # and gcc reads the .gch in a build made as the loops' are
    build_beside(files, prelude.include_line(text) + "int tn_probe(void) { return 1; }\n",
                 strict(recipe), tmp_path / "probe")


def test_a_build_with_other_options_reads_the_text(cc_or_skip, tmp_path):
    recipe = compiler.make_recipe(("-DTN_PROBE=1",))
    files = prelude.files(TEXT, recipe)
    other = dataclasses.replace(recipe, link_args=("-O0",))
    with pytest.raises(CompileError, match="invalid-pch"):
        build_beside(files, module_source("other"), strict(other), tmp_path / "strict")
    # without the strictness the same build succeeds from the header's text
    build_beside(files, module_source("other"), other, tmp_path / "lenient")


def test_a_module_builds_from_the_text_alone(cc_or_skip, monkeypatch):
    """A compiler that cannot precompile leaves the header alone in the
    entry, and modules still build from it."""
    def cannot(*args, **kwargs):
        raise CompileError("no precompiled headers here")
    monkeypatch.setattr(prelude, "precompile_header", cannot)
    files = prelude.files(TEXT, compiler.make_recipe())
    assert sorted(files) == [prelude.header_name(TEXT)]
    built = cache.load_module("textonly", module_source("textonly"),
                              beside=prelude.beside(TEXT, ()))
    assert built.three() == 3


def test_a_module_built_with_its_prelude_keeps_no_copy_of_it(cc_or_skip):
    built = cache.load_module("withprelude", module_source("withprelude"),
                              beside=prelude.beside(TEXT, ()))
    assert built.three() == 3
    entry = Path(built.__file__).parent
    assert sorted(p.name for p in entry.iterdir() if ".h" in p.name) == []


def test_the_prelude_is_made_only_when_a_module_is_built(cc_or_skip, monkeypatch):
    source = module_source("lazy")
    cache.load_module("lazy", source, beside=prelude.beside(TEXT, ()))
    cache._forget_loaded()
    made = []
    monkeypatch.setattr(prelude, "files", lambda *args: made.append(args) or {})
    assert cache.load_module("lazy", source, beside=prelude.beside(TEXT, ())).three() == 3
    assert made == []


def test_a_damaged_precompiled_header_is_rebuilt_with_a_warning(cc_or_skip, tmp_path):
    recipe = compiler.make_recipe()
    files = prelude.files(TEXT, recipe)
    gch = files[prelude.header_name(TEXT) + ".gch"]
    whole = gch.read_bytes()
    gch.write_bytes(whole[: len(whole) // 3])     # truncated: gcc would stop on it
    cache._forget_loaded()
    with pytest.warns(CacheWarning, match="sha256|bytes"):
        again = prelude.files(TEXT, recipe)
    assert again[gch.name].stat().st_size > len(whole) // 3
    # whole again: gcc reads it (strictly) in a build like the prelude's
    build_beside(again, module_source("afterdamage"), strict(recipe), tmp_path / "after")


def test_the_check_runs_once_per_process(cc_or_skip):
    recipe = compiler.make_recipe()
    files = prelude.files(TEXT, recipe)
    header = files[prelude.header_name(TEXT)]
    header.write_text("damaged")
    # remembered as checked: not read again in this process
    assert prelude.files(TEXT, recipe)[header.name] == header
    cache._forget_loaded()
    with pytest.warns(CacheWarning):
        prelude.files(TEXT, recipe)
    assert header.read_text() == TEXT


def test_an_entry_of_files_appears_whole_or_not_at_all(tmp_path):
    recipe = compiler.make_recipe()

    def fails(directory):
        (directory / "half").write_text("written before the failure")
        raise RuntimeError("the build failed")

    with pytest.raises(RuntimeError, match="the build failed"):
        cache.load_files("halfbuilt", "material", recipe, fails)
    assert not (cache.entries_dir() / cache.files_key("halfbuilt", "material", recipe)).exists()
    assert not list(cache.entries_dir().glob(".build-*"))

    entry = cache.load_files("whole", "material", recipe,
                             lambda directory: (directory / "a.txt").write_text("a"))
    assert (entry / "a.txt").read_text() == "a"
    # listed and cleared like a module's entry
    assert "whole" in [e.name for e in cache.info().entries]
    assert cache.clear() == 1 and not entry.exists()


def test_entries_of_files_are_keyed_by_name_material_and_recipe():
    recipe = compiler.make_recipe()
    key = cache.files_key("a", "text", recipe)
    assert len({key, cache.files_key("b", "text", recipe), cache.files_key("a", "other", recipe),
                cache.files_key("a", "text", compiler.make_recipe(("-DX",)))}) == 4
    # never the key of a module with that source
    assert key != cache._key("a\0text", recipe)


@pytest.mark.parametrize("name", ["../escape", ".hidden", "meta.json"])
def test_beside_names_plain_files(cc_or_skip, tmp_path, name):
    header = tmp_path / "h.h"
    header.write_text("")
    with pytest.raises(ValueError, match="plain files"):
        cache.load_module("badbeside", module_source("badbeside"),
                          beside=lambda: {name: header})


def test_load_files_wants_an_identifier():
    with pytest.raises(ValueError, match="C identifier"):
        cache.load_files("not a name", "", compiler.make_recipe(), lambda d: None)


def test_the_step_modules_prelude_is_what_they_used_to_start_with():
    assert module.step_module_prelude() == HEADERS + runtime.header()


def test_the_host_kernels_prelude_is_precompiled_as_cpp(cc_or_skip, tmp_path):
    """The CUDA kernels run on the host (C++) start with their header as a
    prelude: gcc reads its C++ precompiled form in their build (strictly:
    a .gch it could not use would fail), a module keeps no copy of it, and a
    C-precompiled prelude of the same text is another entry."""
    from tenure.linkers.cuda import host_kernels
    text = host_kernels._header_text()
    recipe = host_kernels._recipe()
    files = prelude.files(text, recipe, language="c++")
    header = prelude.header_name(text)
    assert sorted(files) == [header, header + ".gch"]
    source = prelude.include_line(text) + "extern \"C\" int tn_probe(void) { return 1; }\n"
    directory = tmp_path / "probe"
    directory.mkdir()
    for name, path in files.items():
        os.link(path, directory / name)
    (directory / "probe.cu").write_text(source)
    compiler.compile_shared_library(directory / "probe.cu", directory / "probe.so",
                                    strict(recipe))
    c_files = prelude.files(text, compiler.make_recipe(), language="c")
    assert c_files[header] != files[header]
    with tn.config.change_flags(cuda_emulation=True):
        x = tn.vector("x")
        f = tn.function([x], tn.exp(x) * 2, mode=tn.Mode(linker="cuda"))
        np.testing.assert_allclose(f(np.arange(3.0)).get(), np.exp(np.arange(3.0)) * 2)
    modules = list(cache.entries_dir().glob("*/kernels.cu"))
    assert modules and all(p.read_text().startswith(prelude.include_line(text))
                           for p in modules)
    assert not [p for p in cache.entries_dir().glob("*/tn_prelude_*") if p.parent
                in {m.parent for m in modules}]


def test_precompile_header_knows_two_languages(tmp_path):
    with pytest.raises(ValueError, match="'c' or 'c\\+\\+'"):
        compiler.precompile_header(tmp_path / "h.h", tmp_path / "h.h.gch",
                                   compiler.make_recipe(), language="fortran")
