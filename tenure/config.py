"""Configuration flags.

Flags have defaults, can be set from the ``TENURE_FLAGS`` environment variable
(``TENURE_FLAGS="floatX=float32,linker=py"``) and changed for a block of code::

    with tn.config.change_flags(floatX="float32"):
        x = tn.matrix()          # float32

Every flag validates its value, so a typo fails loudly instead of being ignored.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_FLOAT_DTYPES = ("float64", "float32", "float16")
#: linker names a Mode can use: "py" (the NumPy executor) and "c" (the whole graph
#: compiled into one C module; falls back to "py" without a C compiler).  The CUDA
#: linker joins this list when it lands.
LINKERS = ("py", "c")


@dataclass
class _Flag:
    name: str
    default: Any
    doc: str
    parse: Callable[[str], Any]
    check: Callable[[Any], Any]


def _check_floatx(value):
    if value not in _FLOAT_DTYPES:
        raise ValueError(f"config.floatX: expected one of {', '.join(_FLOAT_DTYPES)}, "
                         f"got {value!r}")
    return value


def _check_linker(value):
    if value not in LINKERS:
        raise ValueError(f"config.linker: expected one of {', '.join(LINKERS)}, got {value!r}")
    return value


def _check_device(value):
    if value not in ("cpu", "cuda"):
        raise ValueError(f"config.device: expected 'cpu' or 'cuda', got {value!r}")
    return value


def _parse_bool(text: str) -> bool:
    lowered = str(text).strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected a boolean (true/false/1/0), got {text!r}")


def _check_bool(value):
    if not isinstance(value, bool):
        raise ValueError(f"expected True or False, got {value!r}")
    return value


def _default_compiledir() -> str:
    """The per-user cache directory for compiled modules (``<user cache>/tenure``)."""
    home = os.path.expanduser("~")
    if sys.platform == "darwin":
        base = os.path.join(home, "Library", "Caches")
    elif sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or os.path.join(home, "AppData", "Local")
    else:
        # The XDG spec says a relative XDG_CACHE_HOME is invalid and must be ignored.
        xdg = os.environ.get("XDG_CACHE_HOME", "")
        base = xdg if os.path.isabs(xdg) else os.path.join(home, ".cache")
    return os.path.join(base, "tenure")


def _check_compiledir(value):
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected a directory path (a non-empty string), got {value!r}")
    # Absolute now, so a later chdir cannot move the cache; "~" because
    # TENURE_FLAGS=compiledir=~/x reaches us unexpanded.
    return os.path.abspath(os.path.expanduser(value.strip()))


#: the units a size flag may carry (case-insensitive): bytes, SI and binary
_SIZE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
               "k": 2**10, "kib": 2**10, "m": 2**20, "mib": 2**20, "g": 2**30, "gib": 2**30,
               "t": 2**40, "tib": 2**40}


def _parse_size(text) -> int:
    """``"512MiB"`` -> 536870912; a bare number is bytes."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    if not isinstance(text, str):
        raise ValueError(f"expected a size in bytes (an int, or a string such as '512MiB' "
                         f"or '1GB'), got {text!r}")
    number = text.strip().rstrip("bBiIkKmMgGtT").strip()
    unit = text.strip()[len(number):].strip().lower() if number else None
    try:
        value = float(number)
    except ValueError:
        value = None
    if value is None or unit not in _SIZE_UNITS or not 0 <= value < float("inf"):
        raise ValueError(f"expected a size in bytes (a number with an optional unit: "
                         f"B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), got {text!r}")
    return int(value * _SIZE_UNITS[unit])


def _check_size(value):
    # bool is an int subclass; True as a size is a typo, not a request.
    if isinstance(value, bool):
        raise ValueError(f"expected a size in bytes, got {value!r}")
    size = _parse_size(value)
    if size < 0:
        raise ValueError(f"expected a size >= 0 bytes, got {value!r}")
    return size


def _check_cxx(value):
    if not isinstance(value, str):
        raise ValueError(f"expected a compiler command (a string, empty to detect one), "
                         f"got {value!r}")
    return value.strip()


def _parse_auto_bool(text: str) -> bool | None:
    return None if str(text).strip().lower() in ("", "auto", "none") else _parse_bool(text)


def _check_auto_bool(value):
    if value is not None and not isinstance(value, bool):
        raise ValueError(f"expected True, False or None (auto), got {value!r}")
    return value


def _check_count(value):
    # bool is an int subclass; True as a size is a typo, not a request.
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"expected an integer >= 0, got {value!r}")
    return value


def _check_threads(value):
    # Compiled into C as an int; more threads than this is a typo.
    if _check_count(value) > 4096:
        raise ValueError(f"expected at most 4096 threads, got {value!r}")
    return value


_FLAGS = {
    flag.name: flag for flag in (
        _Flag("floatX", "float64",
              "dtype of float tensors created without a dtype, and of Python float constants",
              str, _check_floatx),
        _Flag("linker", "c",
              "the linker that compiled functions use by default: 'c' (the C linker; "
              "without a working C compiler it runs the Python executor instead, with "
              "one warning) or 'py' (the Python executor)",
              str, _check_linker),
        _Flag("allow_gc", True,
              "free each intermediate as soon as its last reader has run; when off, "
              "intermediates stay between calls and are overwritten in place by the next "
              "call (less allocation, more memory held)",
              _parse_bool, _check_bool),
        _Flag("compiledir", _default_compiledir(),
              "where compiled C modules are cached; each interpreter uses its own "
              "subdirectory <platform>-<python tag> of it (`python -m tenure cache info`)",
              str, _check_compiledir),
        _Flag("compiledir_max_size", 2**30,
              "the most the entries of the compile cache may take, in bytes (an int, or a "
              "string such as '512MiB' or '2GB'); after a build the least recently used "
              "entries beyond it are removed (checked at a process's first build, then "
              "after each sixteenth of it built). 0: no limit",
              _parse_size, _check_size),
        _Flag("cxx", "",
              "the C compiler command (e.g. 'gcc' or 'ccache clang'); empty: $CC, else the "
              "first of cc, gcc, clang on PATH that compiles a test file",
              str, _check_cxx),
        _Flag("openmp", None,
              "whether compiled C loops (large elementwise ones and reductions) use the "
              "machine's cores through OpenMP: None (auto) when the compiler supports "
              "-fopenmp, True the same but warns when it does not, False never",
              _parse_auto_bool, _check_auto_bool),
        _Flag("openmp_elemwise_minsize", 200_000,
              "with openmp, the number of elements (elementwise: of the output; "
              "reductions: of the broadcast input) from which a C loop runs on several "
              "threads; below it, starting them costs more than they save.  Compiled "
              "into the code: changing it compiles the graph again",
              int, _check_count),
        _Flag("device", "cpu",
              "where tn.shared stores a value given as host data when no device= is "
              "named: 'cpu', or 'cuda' (device storage whose get_value() returns NumPy "
              "copies; functions using it need Mode(linker='cuda'))",
              str, _check_device),
        _Flag("cuda_emulation", False,
              "run the 'cuda' device on the emulated device: device arrays over host "
              "memory that refuse implicit conversion as CuPy's do, and the CUDA kernels "
              "compiled as host C++ (for testing the GPU path without a GPU; "
              "tenure.linkers.cuda.emulated_device)",
              _parse_bool, _check_bool),
        _Flag("cuda_graphs", True,
              "Mode(linker='cuda') functions capture their kernel sequence as a CUDA "
              "graph once per input-shape signature and replay it on later calls (one "
              "launch instead of one per node); functions that cannot be captured run as "
              "before, and say why (tenure.linkers.cuda.graphs.graph_status)",
              _parse_bool, _check_bool),
        _Flag("openmp_threads", 0,
              "with openmp, the threads a parallel C loop uses; 0: OpenMP's default "
              "($OMP_NUM_THREADS, else one per core).  Compiled into the code",
              int, _check_threads),
    )
}


class _Config:
    """The flag values; attribute access reads and writes them (validated)."""

    def __init__(self):
        object.__setattr__(self, "_values", {n: f.default for n, f in _FLAGS.items()})

    def __getattr__(self, name):
        values = object.__getattribute__(self, "_values")
        if name in values:
            return values[name]
        raise AttributeError(f"config has no flag {name!r}; flags: {', '.join(sorted(_FLAGS))}")

    def __setattr__(self, name, value):
        if name not in _FLAGS:
            raise AttributeError(f"config has no flag {name!r}; flags: "
                                 f"{', '.join(sorted(_FLAGS))}")
        self._values[name] = _checked(name, value)

    def __dir__(self):
        return sorted(_FLAGS) + ["change_flags", "flags"]

    def flags(self) -> dict[str, Any]:
        """A copy of the current flag values."""
        return dict(self._values)

    @contextlib.contextmanager
    def change_flags(self, **changes):
        """Set flags for the duration of a ``with`` block, then restore them."""
        old = dict(self._values)
        try:
            for name, value in changes.items():
                setattr(self, name, value)
            yield self
        finally:
            self._values.clear()
            self._values.update(old)

    def __repr__(self):
        return "config(" + ", ".join(f"{k}={v!r}" for k, v in self._values.items()) + ")"


def _checked(name: str, value):
    """``value`` validated for flag ``name``; errors name the flag."""
    try:
        return _FLAGS[name].check(value)
    except ValueError as exc:
        message = str(exc)
        if not message.startswith(f"config.{name}"):
            message = f"config.{name}: {message}"
        raise ValueError(message) from None


def parse_flags_string(text: str) -> dict[str, Any]:
    """``"floatX=float32,linker=py"`` as a validated dict."""
    result = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        if "=" not in item:
            raise ValueError(f"TENURE_FLAGS: expected name=value, got {item!r}")
        name, raw = (s.strip() for s in item.split("=", 1))
        if name not in _FLAGS:
            raise ValueError(f"TENURE_FLAGS: unknown flag {name!r}; flags: "
                             f"{', '.join(sorted(_FLAGS))}")
        flag = _FLAGS[name]
        try:
            result[name] = flag.check(flag.parse(raw))
        except ValueError as exc:
            raise ValueError(f"TENURE_FLAGS: bad value for {name}: {exc}") from None
    return result


config = _Config()
for _name, _value in parse_flags_string(os.environ.get("TENURE_FLAGS", "")).items():
    setattr(config, _name, _value)


# `from tenure import config` gives this module; make its attributes the flags
# so `tn.config.floatX` and `tn.config.change_flags` work on the module too.
class _ConfigModule(type(sys)):
    def __getattr__(self, name):
        return getattr(config, name)

    def __setattr__(self, name, value):
        if name in _FLAGS:
            setattr(config, name, value)
        elif name in self.__dict__:
            super().__setattr__(name, value)
        else:  # most likely a misspelt flag: fail instead of creating an attribute
            raise AttributeError(f"config has no flag {name!r}; flags: "
                                 f"{', '.join(sorted(_FLAGS))}")


sys.modules[__name__].__class__ = _ConfigModule
change_flags = config.change_flags
flags = config.flags
