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
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import default_flags_env

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "doc"

#: pages whose examples must run (each must report at least one doctest)
PAGES_WITH_EXAMPLES = ("index", "install", "tutorial", "training", "memory", "inplace", "planning",
                       "seeing", "api", "distributed", "gpu", "cuda", "writing_an_op", "loops",
                       "porting")


@pytest.fixture(scope="module")
def doctrees(tmp_path_factory) -> Path:
    """Where Sphinx keeps what it read of the docs, shared by the two builds
    (one worker runs both: ``xdist_group``): the second reuses the first's
    reading, 4 of its 8 s.  A warning while reading fails the first build,
    whichever it is."""
    return tmp_path_factory.mktemp("doctrees")


def _sphinx(builder: str, outdir: Path, doctrees: Path) -> subprocess.CompletedProcess:
    if importlib.util.find_spec("sphinx") is None:
        pytest.fail("Sphinx is not installed; it is part of the [test] extra "
                    "(pip install -e '.[test]')")
    env = default_flags_env()  # the examples assume the default flags
    return subprocess.run(
        [sys.executable, "-m", "sphinx", "-b", builder, "-W", "--keep-going", "-q",
         "-d", str(doctrees), str(DOC), str(outdir)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def _report(proc: subprocess.CompletedProcess) -> str:
    return f"exit {proc.returncode}\n--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"


@pytest.mark.xdist_group("sphinx")
def test_doc_examples_pass(tmp_path, doctrees):
    outdir = tmp_path / "doctest"
    proc = _sphinx("doctest", outdir, doctrees)
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


@pytest.mark.xdist_group("sphinx")
def test_doc_html_builds_without_warnings(tmp_path, doctrees):
    outdir = tmp_path / "html"
    proc = _sphinx("html", outdir, doctrees)
    assert proc.returncode == 0, _report(proc)
    assert (outdir / "index.html").exists()
    api = (outdir / "api.html").read_text()
    # autodoc found the package (an import failure is only a warning per object)
    for name in ("tenure.function.function", "tenure.function.In", "tenure.function.Out",
                 "tenure.symbolic.shared.SharedVariable.get_value",
                 "tenure.symbolic.ops.elemwise.exp", "tenure.printing.debugprint"):
        assert f'id="{name}"' in api, f"{name} is missing from the API reference"


# ----------------------------------------------------------------------------
# The figures the docs give are the ones measured.

#: "within 1.5% of the measured peak": how close memory_report's prediction is
PLAN_ACCURACY = re.compile(r"within\s+(\d+(?:\.\d+)?)%\s+of\s+the\s+measured\s+peak")


def _plan_accuracy_claims() -> dict[str, list[float]]:
    claims = {}
    for path in [ROOT / "README.md", *sorted(DOC.glob("*.rst"))]:
        found = [float(m.group(1)) for m in PLAN_ACCURACY.finditer(path.read_text())]
        if found:
            claims[path.relative_to(ROOT).as_posix()] = found
    return claims


def test_the_docs_give_one_figure_for_the_plans_accuracy():
    claims = _plan_accuracy_claims()
    assert {"README.md", "doc/planning.rst"} <= set(claims), claims
    figures = {figure for found in claims.values() for figure in found}
    assert len(figures) == 1, f"the docs disagree on how close a plan is: {claims}"
    # and no page states another tolerance for the predicted peak
    for path in [ROOT / "README.md", *sorted(DOC.glob("*.rst"))]:
        text = " ".join(path.read_text().split())
        for match in re.finditer(r"predicted peak[^.]{0,80}?within\s+(\d+(?:\.\d+)?)%", text):
            assert float(match.group(1)) in figures, \
                f"{path.name}: {match.group(0)!r} against {figures}"


#: a difference this small (bytes) is Python's own objects, not a buffer
SMALL = 1024


@pytest.mark.parametrize("linker", ["py", "c"])
def test_the_plans_accuracy_the_docs_give_is_measured(linker, monkeypatch):
    """The benchmark workloads of tests/linkers/test_report.py, on the NumPy
    executor and the C linker: every prediction is within the docs' figure
    of tracemalloc's peak."""
    import numpy as np

    import tenure as tn
    from tests.linkers import test_report

    (figure,) = {f for found in _plan_accuracy_claims().values() for f in found}
    if linker == "c":
        from tenure.linkers.c import compiler
        if compiler.find_compiler() is None:
            pytest.skip("no working C compiler")
        function = tn.function

        def on_c(*args, **kwargs):
            kwargs["mode"] = tn.Mode(linker="c")
            return function(*args, **kwargs)
        monkeypatch.setattr(test_report.tn, "function", on_c)
    errors = {}
    for name, build in test_report.WORKLOADS.items():
        f, args = build(np.random.default_rng(0))
        assert f.mode.linker == linker
        report = f.memory_report(*args, print_report=False)
        # (on the C linker the elemwise workload's plan needs no memory at
        # all: a few hundred bytes of Python objects are measured, 100% of 0)
        if abs(report.measured_peak - report.predicted_peak) > SMALL:
            errors[name] = (abs(report.measured_peak - report.predicted_peak)
                            / report.measured_peak)
    assert max(errors.values(), default=0) <= figure / 100, \
        f"the docs say within {figure}%: {({k: f'{v:.2%}' for k, v in errors.items()})}"


#: the first memory report of a fresh process, of a function with a matrix
#: product on the C linker (whose BLAS comes from SciPy, imported lazily)
FIRST_REPORT = """
import sys
import numpy as np
import tenure as tn
from tests.linkers import test_report

function = tn.function

def on_c(*args, **kwargs):
    kwargs["mode"] = tn.Mode(linker="c")
    return function(*args, **kwargs)

tn.function = on_c
f, args = test_report.WORKLOADS[sys.argv[1]](np.random.default_rng(0))
assert f.mode.linker == "c"
report = f.memory_report(*args)
print(report.predicted_peak, report.measured_peak)
"""


@pytest.mark.parametrize("name", ["mlp_infer", "mlp_train"])
def test_the_first_report_of_a_process_is_as_accurate_as_the_docs_say(name):
    """Nothing imported on first use (SciPy's BLAS, on the C linker) counts
    in the first measurement of a process: no call before it is needed."""
    from tenure.linkers.c import compiler
    if compiler.find_compiler() is None:
        pytest.skip("no working C compiler")
    (figure,) = {f for found in _plan_accuracy_claims().values() for f in found}
    done = subprocess.run([sys.executable, "-c", FIRST_REPORT, name], cwd=ROOT,
                          env=default_flags_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("\n") == 1, f"the report printed itself: {done.stdout!r}"
    predicted, measured = map(int, done.stdout.split())
    error = abs(measured - predicted) / measured
    assert error <= figure / 100, \
        f"{name}: the first report of a process predicted {predicted:,} bytes and " \
        f"measured {measured:,} ({error:.2%}; the docs say within {figure}%)"


def test_the_readme_names_every_doc_page():
    """README's list of the docs names each page by its title (the part
    before a colon), so a new page is not missing from it."""
    readme = " ".join((ROOT / "README.md").read_text().split())
    index = (DOC / "index.rst").read_text()
    pages = re.search(r":caption: Contents\n\n((?:   \S+\n)+)", index).group(1).split()
    assert len(pages) > 5, pages
    for page in pages:
        title = (DOC / f"{page}.rst").read_text().splitlines()[0].split(":")[0]
        assert f'"{title}"' in readme, f"README.md does not name the page {title!r} ({page}.rst)"


#: what the docs once said about linkers tenure has (the C, CUDA and Dask linkers)
MISSING_LINKER = re.compile(r"this build of tenure does not have|\bno (?:C|CUDA|Dask) linker\b|"
                            r"\b(?:C|CUDA|Dask) linker\b[^.]{0,40}\bnot (?:yet )?(?:available|"
                            r"implemented|supported)", re.IGNORECASE)


def test_no_page_says_a_linker_tenure_has_is_missing():
    for path in [ROOT / "README.md", *sorted(DOC.glob("*.rst"))]:
        text = " ".join(path.read_text().split())
        found = [m.group(0) for m in MISSING_LINKER.finditer(text)]
        assert not found, f"{path.name}: {found}"


def test_the_api_reference_describes_every_flag():
    """Each of ``tn.config``'s flags has its entry, with its default, in doc/api.rst."""
    from tenure.config import flags

    api = (DOC / "api.rst").read_text()
    documented = set(re.findall(r"^``(\w+)`` \(default", api, re.MULTILINE))
    assert set(flags()) <= documented, f"undocumented flags: {set(flags()) - documented}"
