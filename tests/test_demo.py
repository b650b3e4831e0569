"""The demo (``python -m tenure.demo``) runs, trains to high accuracy, and checks its arguments."""

import argparse
import os
import struct
import subprocess
import sys
import threading

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
        need_module("matplotlib", 'pip install -e ".[plot]"')
    path = tmp_path / f"step{suffix}"
    assert demo.main(["--epochs", "1", "--samples", "60", "--memory-picture", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"written to {path}" in out
    data = path.read_bytes()
    if suffix == ".png":
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
    else:
        assert data.count(b'class="band"') > 3 and b"tenure demo: one training step" in data


# ----------------------------------------------------------------------------
# The demo's output in a log, and its --help.

def _run_demo(args, **kwargs):
    env = dict(os.environ, COLUMNS="100")
    env.pop("TENURE_FLAGS", None)
    return subprocess.run([sys.executable, "-m", "tenure.demo", *args], env=env,
                          timeout=180, **kwargs)


TINY = ["--epochs", "3", "--samples", "30", "--batch-size", "8", "--hidden", "8"]


def test_demo_output_to_a_pipe_has_one_line_per_epoch_and_no_progress_frames():
    """Not on a terminal, tqdm draws no bar: no carriage returns (``0/93``
    frames) reach a log, and each epoch is one line."""
    proc = _run_demo(TINY, capture_output=True, text=False)
    assert proc.returncode == 0, proc.stderr.decode()
    out, err = proc.stdout.decode(), proc.stderr.decode()
    assert b"\r" not in proc.stdout and b"\r" not in proc.stderr, (out, err)
    epochs = [line for line in out.splitlines() if line.startswith("epoch")]
    assert [line.split()[1] for line in epochs] == ["1/3", "2/3", "3/3"], out
    assert all("loss" in line for line in epochs), out
    assert "batch/s" not in out + err and "it/s" not in out + err, (out, err)
    assert "final test accuracy" in out


def test_demo_output_to_a_file_has_no_progress_frames(tmp_path):
    log = tmp_path / "demo.log"
    with open(log, "wb") as f:
        proc = _run_demo(TINY, stdout=f, stderr=subprocess.STDOUT)
    data = log.read_bytes()
    assert proc.returncode == 0, data.decode()
    assert b"\r" not in data, data.decode()
    assert sum(line.startswith(b"epoch") for line in data.splitlines()) == 3, data.decode()


def test_demo_draws_its_progress_bar_on_a_terminal():
    """On a terminal (stderr a pseudo-terminal) the bar is drawn there, and
    stdout keeps only the summary epochs (1, every 10th, the last)."""
    pty = pytest.importorskip("pty")
    fcntl, termios = pytest.importorskip("fcntl"), pytest.importorskip("termios")
    controller, terminal = pty.openpty()
    # a new pseudo-terminal is 0 columns wide: tqdm would draw an empty bar
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    drawn = bytearray()

    def read_terminal():
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # EIO: the terminal's other end is closed
                return
            if not chunk:
                return
            drawn.extend(chunk)

    reader = threading.Thread(target=read_terminal, daemon=True)
    reader.start()
    env = dict(os.environ, COLUMNS="100")
    env.pop("TENURE_FLAGS", None)
    try:
        with subprocess.Popen([sys.executable, "-m", "tenure.demo", "--epochs", "12",
                               "--samples", "30", "--batch-size", "8", "--hidden", "8"],
                              env=env, stdout=subprocess.PIPE, stderr=terminal) as proc:
            os.close(terminal)
            terminal = None
            out, _ = proc.communicate(timeout=180)
        reader.join(timeout=30)
    finally:
        if terminal is not None:
            os.close(terminal)
        os.close(controller)
    assert proc.returncode == 0, bytes(drawn).decode(errors="replace")
    assert b"\r" not in out
    text = out.decode()
    assert [line.split()[1] for line in text.splitlines() if line.startswith("epoch")] == \
        ["1/12", "10/12", "12/12"], text
    assert b"\r" in drawn and b"batch" in drawn, bytes(drawn)


def _help_entries(text: str) -> dict[str, str]:
    """``--option`` -> its description, from argparse's help text."""
    options = text.split("options:", 1)[1]
    entries, current = {}, None
    for line in options.splitlines():
        stripped = line.strip()
        if line.startswith("  -"):
            names, _, description = stripped.partition("  ")
            current = names.split()[-2] if names.split()[-1].isupper() else names.split()[-1]
            current = current.rstrip(",")
            entries[current] = description.strip()
        elif current and stripped:
            entries[current] = (entries[current] + " " + stripped).strip()
    return entries


def test_demo_help_describes_every_option_with_its_default():
    proc = _run_demo(["--help"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert text.startswith("usage: python -m tenure.demo "), text
    assert "demo.py" not in text, text
    assert "`" not in text, text           # no reST markup
    entries = _help_entries(text)
    parser = demo.build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        option = action.option_strings[-1]
        description = entries.get(option, "")
        assert description, f"{option} has no description in --help:\n{text}"
        default = "none" if action.default is None else str(action.default)
        assert f"(default: {default}" in " ".join(description.split()), \
            f"{option}: no default {default!r} in {description!r}"
