"""The documentation builds cleanly and every example in it runs.

``doc/`` is a Sphinx site whose code examples are doctests
(``.. testcode::`` / ``.. testoutput::``); these tests run them and build the
HTML with warnings as errors, so a broken example, a stale output, a bad
cross-reference or a docstring autodoc cannot render fails the suite.
Sphinx is part of the ``[test]`` extra: without it these tests fail, they are
not skipped.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "doc"

#: pages whose examples must run (each must report at least one doctest)
PAGES_WITH_EXAMPLES = ("index", "install", "tutorial", "training", "memory", "inplace", "planning",
                       "seeing", "api", "distributed", "gpu", "cuda")


def _sphinx(builder: str, outdir: Path) -> subprocess.CompletedProcess:
    if importlib.util.find_spec("sphinx") is None:
        pytest.fail("Sphinx is not installed; it is part of the [test] extra "
                    "(pip install -e '.[test]')")
    env = dict(os.environ)
    env.pop("TENURE_FLAGS", None)  # the examples assume the default flags
    return subprocess.run(
        [sys.executable, "-m", "sphinx", "-b", builder, "-W", "--keep-going", "-q",
         "-d", str(outdir.parent / f"doctrees-{builder}"), str(DOC), str(outdir)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def _report(proc: subprocess.CompletedProcess) -> str:
    return f"exit {proc.returncode}\n--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"


def test_doc_examples_pass(tmp_path):
    outdir = tmp_path / "doctest"
    proc = _sphinx("doctest", outdir)
    output = outdir / "output.txt"
    text = output.read_text() if output.exists() else ""
    assert proc.returncode == 0, _report(proc) + f"\n--- output.txt ---\n{text}"

    summary = text.rpartition("Doctest summary")[2]
    ran = re.search(r"^\s*(\d+) tests?\s*$", summary, re.MULTILINE)
    failed = re.search(r"^\s*(\d+) failures? in tests\s*$", summary, re.MULTILINE)
    assert ran and failed, f"no doctest summary in output.txt:\n{text}"
    assert int(ran.group(1)) > 0, f"the docs ran no doctests:\n{text}"
    assert int(failed.group(1)) == 0, text
    for page in PAGES_WITH_EXAMPLES:
        assert f"Document: {page}\n" in text, f"no doctests ran in doc/{page}.rst:\n{text}"


def test_doc_html_builds_without_warnings(tmp_path):
    outdir = tmp_path / "html"
    proc = _sphinx("html", outdir)
    assert proc.returncode == 0, _report(proc)
    assert (outdir / "index.html").exists()
    api = (outdir / "api.html").read_text()
    # autodoc found the package (an import failure is only a warning per object)
    for name in ("tenure.function.function", "tenure.function.In", "tenure.function.Out",
                 "tenure.symbolic.shared.SharedVariable.get_value",
                 "tenure.symbolic.ops.elemwise.exp", "tenure.printing.debugprint"):
        assert f'id="{name}"' in api, f"{name} is missing from the API reference"
