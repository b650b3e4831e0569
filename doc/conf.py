"""Sphinx configuration for the tenure documentation.

Build the site with ``sphinx-build -b html doc doc/_build/html`` and run every
code example with ``sphinx-build -b doctest doc doc/_build/doctest`` (the test
suite does the latter in ``tests/test_docs.py``).
"""

import doctest
import os
import sys

# Let autodoc and the doctests import the package from the source tree, so the
# docs build without installing tenure first.
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)

import tenure  # noqa: E402

project = "tenure"
author = "the tenure developers"
copyright = "the tenure developers"
release = tenure.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.doctest",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    # figures drawn by the doc build from real compiled functions (seeing.rst)
    "matplotlib.sphinxext.plot_directive",
]

exclude_patterns = ["_build", "_generated"]
templates_path = []
nitpicky = False

# -- autodoc -----------------------------------------------------------------
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"show-inheritance": False}

# -- doctest -----------------------------------------------------------------
# Every page's examples start from the same state: NumPy, tenure, and the
# default flags (a page that changes a flag does so inside change_flags).
doctest_global_setup = """
import numpy as np
import tenure as tn
from tenure import In, Out
try:  # examples with PyTorch are skipped where it is not installed
    import torch
except ImportError:
    torch = None
"""
# Outputs are compared exactly (no whitespace normalisation) and exception
# messages are checked too: the error texts shown in the docs are part of
# what the docs promise.
doctest_default_flags = doctest.ELLIPSIS | doctest.DONT_ACCEPT_TRUE_FOR_1

# -- html --------------------------------------------------------------------
html_theme = "alabaster"
html_static_path = []
html_theme_options = {
    "description": "Symbolic tensors, built around memory",
    "fixed_sidebar": True,
}

# -- figures -----------------------------------------------------------------
plot_include_source = True
plot_html_show_source_link = False
plot_html_show_formats = False
plot_formats = [("png", 100)]
plot_rcparams = {"savefig.bbox": "tight"}

# The interactive memory page of the demo's training step, written by every
# build into _generated/ and published next to the pages (seeing.rst links it).
GENERATED = os.path.join(os.path.dirname(__file__), "_generated")
os.makedirs(GENERATED, exist_ok=True)
html_extra_path = ["_generated"]


def write_demo_memory_page(app) -> None:
    import numpy as np
    from tenure import demo
    X, y = demo.make_spirals(np.random.default_rng(0), 342)
    steps = []
    for budget in (None, 0.5):
        _, train, _ = demo.build_model(np.random.default_rng(0), 2, 512, 3, 0.1,
                                       mode=tenure.Mode(activation_memory_budget=budget))
        steps.append(train)
    tenure.memory_html(steps, [X[:1024], y[:1024]], os.path.join(GENERATED, "demo_memory.html"),
                       labels=["no budget", "activation_memory_budget=0.5"],
                       title="tenure: the demo's training step, one call")


def setup(app):
    app.connect("builder-inited", write_demo_memory_page)
