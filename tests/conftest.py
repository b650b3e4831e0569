"""Shared fixtures.  Every behavioural test that compiles a function takes the
``mode`` fixture, so each linker runs the whole suite: a new linker joins by
adding its name to ``LINKERS``."""

import numpy as np
import pytest

import tenure as tn

#: every linker the contract and op suites run on
LINKERS = ["py", "check"]


@pytest.fixture(params=LINKERS)
def mode(request):
    """A compilation mode for each linker."""
    return tn.Mode(linker=request.param)


@pytest.fixture
def rng():
    return np.random.default_rng(12345)
