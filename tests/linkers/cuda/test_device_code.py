"""Device code compiled by tenure (tenure/linkers/cuda/device_code.py): code
that keeps float32 subnormals, cached privately, compiled again when asked.

On the H100 every kernel CuPy compiled flushed float32 subnormals to zero
(CuPy appends ``-ftz=true`` to all its programs); these checks need only
NVRTC or nvcc, no device."""

import os
import stat

import numpy as np
import pytest

import tenure as tn
from tenure.linkers.cuda import device_code, nvrtc
from tenure.linkers.cuda import elemwise as cuda_ew
from tenure.linkers.cuda.kernel_source import NVRTC_OPTIONS, module_source
from tenure.symbolic.ops import elemwise as ew
from tests.linkers.cuda.device_compile import device_compiler


def _float32_module() -> str:
    """abs, x != 0 and x * y on float32: the ops the H100 flushed."""
    x, y = tn.vector("x", dtype="float32"), tn.vector("y", dtype="float32")
    nodes = [abs(x).owner, tn.neq(x, np.float32(0)).owner, (x * y).owner]
    assert all(isinstance(n.op, ew.Elemwise) for n in nodes)
    return module_source([cuda_ew.elemwise_kernel(n) for n in nodes])


@pytest.fixture
def private_cache(tmp_path):
    with tn.config.change_flags(compiledir=str(tmp_path / "cache")):
        yield tmp_path / "cache"


def test_the_device_code_flushes_no_subnormal():
    """The PTX of the options the binaries are compiled with (machine code
    cannot be read back so simply): no ``.ftz`` instruction."""
    device_compiler()
    ptx = nvrtc.compile_ptx(_float32_module())
    assert ".f32" in ptx
    assert ".ftz" not in ptx, [line for line in ptx.splitlines() if ".ftz" in line][:3]


def test_a_module_is_compiled_once_then_read_from_the_private_cache(private_cache,
                                                                    monkeypatch):
    device_compiler()
    source = _float32_module()
    compiles = []
    real = nvrtc.compile_cubin

    def counting(*args, **kwargs):
        compiles.append(args)
        return real(*args, **kwargs)
    monkeypatch.setattr(nvrtc, "compile_cubin", counting)
    first = device_code.binary_for(source, "sm_90")
    again = device_code.binary_for(source, "sm_90")
    assert first == again and first[:4] == b"\x7fELF" and len(compiles) == 1
    (path,) = private_cache.rglob("*.cubin")
    assert path.stem == device_code.binary_key(source, "sm_90")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    # another architecture is another file; ``fresh`` compiles again and replaces
    device_code.binary_for(source, "sm_80")
    path.write_bytes(b"damaged")
    assert device_code.binary_for(source, "sm_90", fresh=True) == first
    assert path.read_bytes() == first and len(compiles) == 3


def test_the_key_follows_source_arch_and_options(monkeypatch):
    device_compiler()
    key = device_code.binary_key("a", "sm_90")
    assert key != device_code.binary_key("b", "sm_90")
    assert key != device_code.binary_key("a", "sm_80")
    monkeypatch.setattr(device_code, "NVRTC_OPTIONS", NVRTC_OPTIONS + ("--use_fast_math",))
    assert key != device_code.binary_key("a", "sm_90")
