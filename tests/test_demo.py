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
from tests.helpers import default_flags_env, need_module


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
                                  ["--batch-size", "x"], ["--memory-picture", "step.txt"]])
def test_demo_rejects_bad_arguments(args, capsys):
    with pytest.raises(SystemExit) as info:
        demo.main(args)
    assert info.value.code == 2
    assert "error" in capsys.readouterr().err


def test_demo_runs_as_a_module():
    proc = subprocess.run([sys.executable, "-m", "tenure.demo", "--epochs", "2",
                           "--samples", "50"], env=default_flags_env(), capture_output=True,
                          text=True, timeout=120)
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


class _NoMatplotlib:
    """A finder of the import system for which matplotlib is not installed."""

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "matplotlib":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def test_demo_without_matplotlib_says_so_before_training(monkeypatch, capsys):
    """A .png picture needs matplotlib: without it the demo stops at once,
    naming the extra and the .html page it can write instead, rather than
    training and then failing with a traceback."""
    for name in [m for m in sys.modules if m.partition(".")[0] == "matplotlib"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [_NoMatplotlib(), *sys.meta_path])
    with pytest.raises(SystemExit) as info:
        demo.main(["--memory-picture", "step.png"])
    assert info.value.code == 2
    captured = capsys.readouterr()
    assert "epoch" not in captured.out
    assert 'pip install -e ".[plot]"' in captured.err and ".html" in captured.err, captured.err


def test_demo_into_a_reader_that_leaves_ends_without_a_traceback():
    """python -m tenure.demo | head: the pipe closes early, and the demo
    stops quietly."""
    demo_run = subprocess.Popen([sys.executable, "-m", "tenure.demo", *TINY],
                                env=default_flags_env(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
    demo_run.stdout.readline()
    demo_run.stdout.close()       # the reader leaves after one line
    _, err = demo_run.communicate(timeout=180)
    assert b"Traceback" not in err and b"BrokenPipe" not in err, err.decode()


# ----------------------------------------------------------------------------
# The demo's output in a log, and its --help.

def _run_demo(args, **kwargs):
    env = dict(default_flags_env(), COLUMNS="100")
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
    env = dict(default_flags_env(), COLUMNS="100")
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


# ----------------------------------------------------------------------------
# ``python -m tenure.demo rnn``: a recurrent network trained through tn.scan,
# and the MLP demo's command line unchanged beside it.

RNN_TINY = ["rnn", "--epochs", "3", "--samples", "400", "--steps", "9", "--hidden", "8",
            "--batch-size", "16", "--seed", "1"]


def _number_after(text: str, marker: str) -> float:
    return float(text.split(marker, 1)[1].split()[0].rstrip(";,"))


def test_rnn_demo_learns_to_tell_the_sign_of_a_sum(capsys):
    assert demo.main(RNN_TINY) == 0
    out = capsys.readouterr().out
    assert "RNN h_t = tanh(x_t Wx + h_(t-1) Wh + b), 1-8-2" in out, out
    assert "scan over 9 steps, on 400 sequences" in out, out
    epochs = [line for line in out.splitlines() if line.startswith("epoch")]
    assert [line.split()[1] for line in epochs] == ["1/3", "2/3", "3/3"], out
    before = _number_after(out, "test loss ")
    after = _number_after(out, "before training, ")
    assert after < 0.6 * before, out
    accuracy = _number_after(out, "final test accuracy ")
    baseline = _number_after(out, f"test accuracy {accuracy:.3f} vs ")
    assert 0.5 <= baseline < 0.7 and accuracy >= baseline + 0.2, out
    assert "the RNN beats the majority-class baseline" in out, out
    assert "final test accuracy" in out and "MLP" not in out


def test_rnn_demo_model_trains_shared_parameters_through_scan():
    from tenure import demo_rnn
    rng = np.random.default_rng(0)
    params, train, evaluate = demo_rnn.build_model(rng, 1, 4, 2, 0.1)
    assert all(isinstance(p, tn.SharedVariable) for p in params)
    assert [p.name for p in params] == ["Wx", "Wh", "b", "Wy", "by"]
    X, y = demo_rnn.make_sign_sequences(rng, 6, 5)
    assert X.shape == (6, 5, 1) and y.dtype == np.int32
    assert np.array_equal(y, (X.sum(axis=(1, 2)) > 0).astype(np.int32))
    # the forward pass is the cell's recurrence, step by step
    Wx, Wh, b, Wy, by = (p.get_value() for p in params)
    h = np.zeros((6, 4))
    for t in range(5):
        h = np.tanh(X[:, t] @ Wx + h @ Wh + b)
    logits = h @ Wy + by
    expected = -np.mean((logits - np.log(np.exp(logits).sum(axis=1, keepdims=True)))
                        [np.arange(6), y])
    loss, predicted = evaluate(X, y)
    np.testing.assert_allclose(loss, expected, rtol=1e-10)
    np.testing.assert_array_equal(predicted, logits.argmax(axis=1))
    before = [p.get_value() for p in params]  # copies: the update may go in place
    np.testing.assert_allclose(train(X, y), expected, rtol=1e-10)
    # the gradient reached every parameter, the recurrent weights included
    assert all(not np.array_equal(b, p.get_value()) for b, p in zip(before, params))
    assert train.inputs[0].borrow and train.inputs[1].borrow


@pytest.mark.parametrize("args", [["--epochs", "0"], ["--steps", "0"], ["--hidden", "-3"],
                                  ["--lr", "0"], ["--momentum", "1"], ["--batch-size", "x"],
                                  ["--memory-picture", "x.png"]])
def test_rnn_demo_rejects_bad_arguments(args, capsys):
    with pytest.raises(SystemExit) as info:
        demo.main(["rnn", *args])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "error" in err and "python -m tenure.demo rnn" in err, err


def test_mlp_demo_still_parses_its_options():
    """Without the subcommand the demo is the MLP, with all its options as before."""
    args = demo.build_parser().parse_args(
        ["--epochs", "5", "--batch-size", "16", "--hidden", "32", "--lr", "0.05",
         "--seed", "3", "--samples", "200", "--memory-picture", "step.png"])
    assert vars(args) == dict(epochs=5, batch_size=16, hidden=32, lr=0.05, seed=3,
                              samples=200, memory_picture="step.png")
    defaults = vars(demo.build_parser().parse_args([]))
    assert defaults == dict(epochs=40, batch_size=32, hidden=64, lr=0.1, seed=0, samples=1000,
                            memory_picture=None)


def test_mlp_demo_tells_where_the_subcommand_goes(capsys):
    for args in (["--epochs", "1", "rnn"], ["--no-such-option"]):
        with pytest.raises(SystemExit) as info:
            demo.main(args)
        assert info.value.code == 2
    err = capsys.readouterr().err
    assert "the subcommand rnn comes first: python -m tenure.demo rnn" in err, err
    assert "unrecognized arguments: --no-such-option" in err, err


def test_rnn_demo_runs_as_a_module_and_logs_one_line_per_epoch():
    args = ["rnn", "--epochs", "2", "--samples", "100", "--steps", "5", "--hidden", "8"]
    proc = _run_demo(args, capture_output=True, text=False)
    assert proc.returncode == 0, proc.stderr.decode()
    out = proc.stdout.decode()
    assert b"\r" not in proc.stdout and b"\r" not in proc.stderr, (out, proc.stderr.decode())
    epochs = [line for line in out.splitlines() if line.startswith("epoch")]
    assert [line.split()[1] for line in epochs] == ["1/2", "2/2"], out
    assert "final test accuracy" in out and "majority-class baseline" in out, out


def _help(args, capsys) -> str:
    with pytest.raises(SystemExit) as info:
        demo.main([*args, "--help"])
    assert info.value.code == 0
    return capsys.readouterr().out


def test_both_helps_say_what_they_do(capsys, monkeypatch):
    from tenure import demo_rnn
    monkeypatch.setenv("COLUMNS", "100")
    mlp = _help([], capsys)
    assert mlp.startswith("usage: python -m tenure.demo [-h]"), mlp
    assert "Train a small MLP classifier" in mlp, mlp
    assert "python -m tenure.demo rnn --help" in " ".join(mlp.split()), mlp
    text = _help(["rnn"], capsys)
    assert text.startswith("usage: python -m tenure.demo rnn "), text
    assert "Train a small recurrent network with tenure's scan" in text, text
    assert "demo_rnn.py" not in text and "`" not in text, text
    entries = _help_entries(text)
    for action in demo_rnn.build_parser()._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        option = action.option_strings[-1]
        description = entries.get(option, "")
        assert description, f"{option} has no description in --help:\n{text}"
        assert f"(default: {action.default}" in " ".join(description.split()), \
            f"{option}: no default {action.default!r} in {description!r}"
