"""The demo (``python -m tenure.demo``) runs, trains to high accuracy, and checks its arguments."""

import subprocess
import sys

import numpy as np
import pytest

import tenure as tn
from tenure import demo
from tests.helpers import need_module


def test_demo_trains_an_accurate_classifier(capsys):
    assert demo.main(["--epochs", "25", "--samples", "400", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    accuracy = float(out.split("final test accuracy ")[1].split()[0])
    assert accuracy >= 0.9, out
    assert "reused the first's buffer: True" in out


def test_demo_parameters_are_borrowed_shared_variables():
    rng = np.random.default_rng(0)
    params, train, predict = demo.build_model(rng, 2, 8, 3, 0.1)
    assert all(isinstance(p, tn.SharedVariable) for p in params)
    before = [p.get_value() for p in params]  # copies: the update may go in place
    X, y = demo.make_spirals(rng, 10)
    train(X, y)
    # Every parameter changed, and the loss is a float scalar.
    assert all(not np.array_equal(b, p.get_value()) for b, p in zip(before, params))
    assert train.inputs[0].borrow and predict.outputs[0].borrow


@pytest.mark.parametrize("args", [["--epochs", "0"], ["--hidden", "-3"], ["--lr", "0"],
                                  ["--batch-size", "x"]])
def test_demo_rejects_bad_arguments(args, capsys):
    with pytest.raises(SystemExit) as info:
        demo.main(args)
    assert info.value.code == 2
    assert "error" in capsys.readouterr().err


def test_demo_runs_as_a_module():
    proc = subprocess.run([sys.executable, "-m", "tenure.demo", "--epochs", "2",
                           "--samples", "50"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "final test accuracy" in proc.stdout


@pytest.mark.parametrize("suffix", [".html", ".png"])
def test_demo_draws_the_memory_of_a_training_step(suffix, tmp_path, capsys):
    if suffix == ".png":
        need_module("matplotlib", 'pip install "tenure[plot]"')
    path = tmp_path / f"step{suffix}"
    assert demo.main(["--epochs", "1", "--samples", "60", "--memory-picture", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"written to {path}" in out
    data = path.read_bytes()
    if suffix == ".png":
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
    else:
        assert data.count(b'class="band"') > 3 and b"tenure demo: one training step" in data
