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
]

exclude_patterns = ["_build"]
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
