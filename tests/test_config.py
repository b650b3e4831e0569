"""Configuration flags: defaults, validation, change_flags and TENURE_FLAGS."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import tenure as tn

ROOT = Path(tn.__file__).resolve().parents[1]
DEFAULTS = {"floatX": "float64", "linker": "c", "allow_gc": True,
            "compiledir": tn.config._default_compiledir(), "compiledir_max_size": 2**30,
            "cxx": "", "openmp": None,
            "openmp_elemwise_minsize": 200_000, "openmp_threads": 0, "cuda_emulation": False,
            "device": "cpu", "cuda_graphs": True}


@pytest.fixture(autouse=True)
def _restore_flags():
    """Every test leaves the flags as it found them."""
    before = tn.config.flags()
    yield
    for name, value in before.items():
        setattr(tn.config, name, value)


def test_defaults():
    if os.environ.get("TENURE_FLAGS"):
        pytest.skip("TENURE_FLAGS is set in this environment")
    # In a fresh interpreter: this test session runs with its own compiledir
    # and the Python executor as its default linker (see tests/conftest.py).
    proc = _run_python("import tenure as tn; print(repr(tn.config.flags()))", None)
    assert proc.returncode == 0, proc.stderr
    assert eval(proc.stdout) == DEFAULTS


def test_flags_returns_a_copy():
    flags = tn.config.flags()
    flags["floatX"] = "float16"
    assert tn.config.floatX != "float16"


@pytest.mark.parametrize("value", ["float32", "float16", "float64"])
def test_set_floatX(value):
    tn.config.floatX = value
    assert tn.config.floatX == value
    assert tn.vector().dtype == value
    assert tn.constant(1.5).dtype == value


def test_set_allow_gc():
    tn.config.allow_gc = False
    assert tn.config.allow_gc is False


@pytest.mark.parametrize("value", [True, False, None])
def test_set_openmp(value):
    tn.config.openmp = value
    assert tn.config.openmp is value


def test_set_openmp_sizes():
    tn.config.openmp_elemwise_minsize = 0
    tn.config.openmp_threads = 4
    assert (tn.config.openmp_elemwise_minsize, tn.config.openmp_threads) == (0, 4)


@pytest.mark.parametrize("name, value", [
    ("floatX", "int32"), ("floatX", "float"), ("floatX", None), ("floatX", "float128"),
    ("linker", "nope"), ("linker", ""),
    ("allow_gc", "yes"), ("allow_gc", 1), ("allow_gc", None),
    ("openmp", "auto"), ("openmp", 1), ("openmp", "yes"),
    ("openmp_elemwise_minsize", -1), ("openmp_elemwise_minsize", 1.5),
    ("openmp_elemwise_minsize", True), ("openmp_elemwise_minsize", "100"),
    ("openmp_threads", -2), ("openmp_threads", None), ("openmp_threads", False),
    ("openmp_threads", 100_000)])
def test_invalid_values_raise_value_error(name, value):
    before = getattr(tn.config, name)
    with pytest.raises(ValueError):
        setattr(tn.config, name, value)
    assert getattr(tn.config, name) == before  # unchanged


@pytest.mark.parametrize("name, value", [("floatX", "int32"), ("linker", "nope")])
def test_invalid_value_error_names_flag_and_value(name, value):
    with pytest.raises(ValueError) as info:
        setattr(tn.config, name, value)
    msg = str(info.value)
    assert name in msg and repr(value) in msg


def test_invalid_allow_gc_error_names_the_flag():
    with pytest.raises(ValueError, match="allow_gc"):
        tn.config.allow_gc = "yes"


def test_floatX_error_lists_the_choices():
    with pytest.raises(ValueError) as info:
        tn.config.floatX = "int32"
    msg = str(info.value)
    assert "float32" in msg and "float64" in msg


def test_unknown_flag_read_is_attribute_error():
    with pytest.raises(AttributeError, match="no_such_flag"):
        tn.config.no_such_flag


def test_unknown_flag_error_lists_the_flags():
    with pytest.raises(AttributeError) as info:
        tn.config.floatx
    assert "floatX" in str(info.value)


def test_unknown_flag_assignment_is_attribute_error():
    module = sys.modules["tenure.config"]
    try:
        with pytest.raises(AttributeError, match="floatx"):
            tn.config.floatx = "float32"
    finally:
        module.__dict__.pop("floatx", None)


def test_change_flags_sets_and_restores():
    before = tn.config.flags()
    with tn.config.change_flags(floatX="float32", allow_gc=False) as cfg:
        assert tn.config.floatX == "float32"
        assert tn.config.allow_gc is False
        assert cfg.floatX == "float32"
        assert tn.matrix().dtype == "float32"
    assert tn.config.floatX == "float64" or os.environ.get("TENURE_FLAGS")
    assert tn.config.flags() == before


def test_change_flags_nested():
    before = tn.config.flags()
    with tn.config.change_flags(floatX="float32"):
        with tn.config.change_flags(floatX="float16"):
            assert tn.config.floatX == "float16"
        assert tn.config.floatX == "float32"
    assert tn.config.flags() == before


def test_change_flags_restores_on_exception():
    before = tn.config.flags()
    with pytest.raises(RuntimeError, match="boom"):
        with tn.config.change_flags(floatX="float32", allow_gc=False):
            raise RuntimeError("boom")
    assert tn.config.flags() == before


def test_change_flags_invalid_value_raises_and_changes_nothing():
    before = tn.config.flags()
    with pytest.raises(ValueError, match="floatX"):
        with tn.config.change_flags(allow_gc=False, floatX="int8"):
            pytest.fail("the block must not run")
    assert tn.config.flags() == before


def test_change_flags_unknown_flag():
    before = tn.config.flags()
    with pytest.raises(AttributeError, match="bogus"):
        with tn.config.change_flags(bogus=1):
            pytest.fail("the block must not run")
    assert tn.config.flags() == before


def test_change_flags_restores_flags_set_inside_the_block():
    before = tn.config.flags()
    with tn.config.change_flags(floatX="float32"):
        tn.config.allow_gc = False
    assert tn.config.allow_gc is True or os.environ.get("TENURE_FLAGS")
    assert tn.config.flags() == before


def test_floatX_applies_to_python_floats_only():
    def make():
        with tn.config.change_flags(floatX="float32"):
            return tn.shared(np.float64(0.0) + 1.5).dtype, tn.shared(1.5).dtype
    strong, weak = make()
    assert strong == "float64"  # a NumPy scalar keeps its dtype
    assert weak == "float32"    # a Python float follows floatX


def test_linker_flag_is_the_default_mode():
    assert tn.Mode().linker == tn.config.linker
    with pytest.raises(ValueError, match="linker"):
        tn.config.linker = "c-that-does-not-exist"


# --------------------------------------------------------------------------
# TENURE_FLAGS


def test_parse_flags_string():
    parse = tn.config.parse_flags_string
    assert parse("") == {}
    assert parse("floatX=float32") == {"floatX": "float32"}
    assert parse(" floatX = float16 , linker=py ,") == {"floatX": "float16", "linker": "py"}
    assert parse("allow_gc=false") == {"allow_gc": False}
    assert parse("allow_gc=1") == {"allow_gc": True}
    assert parse("allow_gc=Off") == {"allow_gc": False}
    assert parse("openmp=auto") == {"openmp": None}
    assert parse("openmp=") == {"openmp": None}
    assert parse("openmp=off,openmp_threads=2") == {"openmp": False, "openmp_threads": 2}
    assert parse("openmp=1") == {"openmp": True}
    assert parse("openmp_elemwise_minsize=1000") == {"openmp_elemwise_minsize": 1000}


@pytest.mark.parametrize("text, words", [
    ("floatx=float32", ["floatx", "floatX"]),
    ("floatX=int32", ["floatX", "int32"]),
    ("allow_gc=maybe", ["allow_gc", "maybe"]),
    ("linker=cuda9", ["linker", "cuda9"]),
    ("openmp=maybe", ["openmp", "maybe"]),
    ("openmp_threads=-1", ["openmp_threads", "-1"]),
    ("openmp_elemwise_minsize=lots", ["openmp_elemwise_minsize", "lots"]),
    ("floatX", ["floatX", "name=value"]),
])
def test_parse_flags_string_errors_name_the_flag(text, words):
    with pytest.raises(ValueError) as info:
        tn.config.parse_flags_string(text)
    msg = str(info.value)
    assert "TENURE_FLAGS" in msg
    for word in words:
        assert word in msg


def _run_python(code: str, flags: str | None):
    env = dict(os.environ)
    env.pop("TENURE_FLAGS", None)
    if flags is not None:
        env["TENURE_FLAGS"] = flags
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_tenure_flags_environment_variable():
    code = """
        import tenure as tn
        print(tn.matrix().dtype, tn.config.allow_gc, tn.config.linker)
    """
    proc = _run_python(code, "floatX=float32,allow_gc=false")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["float32", "False", "c"]
    proc = _run_python(code, None)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["float64", "True", "c"]


def test_tenure_flags_sets_openmp():
    code = """
        import tenure as tn
        print(tn.config.openmp, tn.config.openmp_elemwise_minsize, tn.config.openmp_threads)
    """
    proc = _run_python(code, "openmp=false,openmp_elemwise_minsize=5000,openmp_threads=3")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "5000", "3"]


@pytest.mark.parametrize("flags, words", [("floatx=float32", ["floatx"]),
                                          ("floatX=int32", ["floatX", "int32"])])
def test_bad_tenure_flags_make_import_fail(flags, words):
    proc = _run_python("import tenure", flags)
    assert proc.returncode != 0
    assert "ValueError" in proc.stderr and "TENURE_FLAGS" in proc.stderr
    for word in words:
        assert word in proc.stderr
