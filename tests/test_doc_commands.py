"""Every shell command in the docs (``doc/*.rst`` and ``README.md``) works.

Commands are found in ``.. code-block:: console`` blocks (``$ `` lines),
shell code blocks (```` ```bash ````, ``.. code-block:: bash``) and inline
literals that start with a command (``python ...``, ``pip install ...``,
``pytest``, ...).  Each one is either *run* (``python -m tenure.demo ...``,
``python -m tenure cache ...`` against a temporary cache) or *validated*
where running it would take minutes, install software or run the test suite
inside itself: the extras a ``pip install`` names exist in ``setup.cfg``,
a benchmark script exists and takes the options shown, ``TENURE_FLAGS``
parse, the environment variables a ``pytest`` line sets are read by the
tests, ``sphinx-build`` uses a builder ``tests/test_docs.py`` runs.

A command no rule knows fails the test: a new kind of doc command needs a
rule here before it can be published.
"""

from __future__ import annotations

import configparser
import os
import re
import shlex
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tenure.config import parse_flags_string
from tests.helpers import default_flags_env

ROOT = Path(__file__).resolve().parents[1]
DOC_FILES = sorted((ROOT / "doc").glob("*.rst")) + [ROOT / "README.md"]

#: the first word of a command (after ``NAME=value`` assignments)
COMMAND_WORDS = {"python", "python3", "pip", "pytest", "sphinx-build", "apt", "apt-get", "brew",
                 "conda", "chmod"}
#: code-block languages whose every line is a shell command
SHELL_LANGUAGES = {"bash", "sh", "shell"}
#: code-block languages that hold no shell commands (any other fails the test)
OTHER_LANGUAGES = {"python", "pycon", "text", "none", "c", "cuda", "cpp", "json", "toml", "ini"}
#: script names the docs use as placeholders for the reader's own program
PLACEHOLDER_SCRIPTS = {"my_script.py", "train.py"}
#: system packages the docs tell to install, and the test module that needs each
SYSTEM_PACKAGES = {"graphviz": "tests/test_graph_picture.py",
                   "chromium": "tests/test_memory_html.py",
                   "chromium-driver": "tests/test_memory_html.py"}
#: environment variables read by other programs than tenure's (OpenMP)
FOREIGN_ENV = {"OMP_NUM_THREADS"}

ENV_ASSIGNMENT = re.compile(r"""([A-Z_][A-Z0-9_]*)=("[^"]*"|'[^']*'|\S+)\s+""")


@dataclass(frozen=True)
class Command:
    text: str    #: the command, whitespace normalised
    where: str   #: "file:line"

    def __str__(self):
        return f"{self.where}: {self.text}"


# ----------------------------------------------------------------------------
# Finding the commands

def _line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def _split_chain(text: str) -> list[str]:
    """``a && b`` -> [a, b]; a trailing ``# comment`` dropped."""
    text = re.sub(r"\s+#.*$", "", text.strip())
    return [part.strip() for part in text.split("&&") if part.strip()]


def _looks_like_command(text: str) -> bool:
    rest = text
    while (match := ENV_ASSIGNMENT.match(rest)):
        rest = rest[match.end():]
    words = rest.split()
    return bool(words) and words[0] in COMMAND_WORDS


def _where(path: Path) -> str:
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name


def _rst_commands(path: Path, text: str) -> list[Command]:
    found, where = [], _where(path)
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        match = re.match(r"\s*\.\. code-block::\s*(\S+)", lines[i])
        if not match:
            i += 1
            continue
        language = match.group(1)
        assert language in {"console"} | SHELL_LANGUAGES | OTHER_LANGUAGES, \
            f"{where}:{i + 1}: code-block language {language!r}: add it to this test's rules"
        i += 1
        while i < len(lines) and (not lines[i].strip() or lines[i].startswith((" ", "\t"))):
            line = lines[i].strip()
            if language == "console" and line.startswith("$ "):
                line = line[2:]
            elif language not in SHELL_LANGUAGES or line.startswith("#"):
                line = ""
            found += [Command(part, f"{where}:{i + 1}") for part in _split_chain(line)]
            i += 1
    # inline literals that start with a command (they may wrap across lines)
    for match in re.finditer(r"``(.+?)``", text, re.DOTALL):
        literal = " ".join(match.group(1).split())
        if _looks_like_command(literal):
            found += [Command(part, f"{where}:{_line_of(text, match.start())}")
                      for part in _split_chain(literal)]
    return found


def _markdown_commands(path: Path, text: str) -> list[Command]:
    found, where = [], _where(path)
    fence = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
    for match in fence.finditer(text):
        language = match.group(1)
        assert language in SHELL_LANGUAGES | OTHER_LANGUAGES, \
            f"{where}:{_line_of(text, match.start())}: code fence {language!r}: add it to " \
            f"this test's rules"
        if language not in SHELL_LANGUAGES:
            continue
        first = _line_of(text, match.start(2))
        for offset, line in enumerate(match.group(2).splitlines()):
            if line.strip() and not line.strip().startswith("#"):
                found += [Command(part, f"{where}:{first + offset}")
                          for part in _split_chain(line)]
    prose = fence.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    for match in re.finditer(r"(?<!`)`([^`]+)`(?!`)", prose):
        literal = " ".join(match.group(1).split())
        if _looks_like_command(literal):
            found += [Command(part, f"{where}:{_line_of(prose, match.start())}")
                      for part in _split_chain(literal)]
    return found


def doc_commands() -> list[Command]:
    """Every command once, with every place it is shown."""
    places: dict[str, list[str]] = {}
    for path in DOC_FILES:
        text = path.read_text()
        for command in (_markdown_commands if path.suffix == ".md" else _rst_commands)(path,
                                                                                       text):
            places.setdefault(command.text, []).append(command.where)
    return [Command(text, ", ".join(wheres)) for text, wheres in places.items()]


# ----------------------------------------------------------------------------
# The rules

def _env() -> dict[str, str]:
    env = default_flags_env()   # the docs assume the default flags
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def _run(argv: list[str], cwd: Path, env: dict[str, str], what: str, timeout: int = 300):
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, \
        f"{what} failed (exit {proc.returncode})\n--- stdout ---\n{proc.stdout}\n" \
        f"--- stderr ---\n{proc.stderr}"
    return proc


def _extras() -> dict[str, list[str]]:
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    return {name: [line.strip() for line in value.splitlines() if line.strip()]
            for name, value in parser["options.extras_require"].items()}


def _check_pip(args: list[str], what: str) -> None:
    assert args[:1] == ["install"], f"{what}: only `pip install` is documented"
    extras = _extras()
    targets = [a for a in args[1:] if a != "-e"]
    assert targets, f"{what}: installs nothing"
    for target in targets:
        match = re.fullmatch(r"(\.|tenure)(?:\[([\w,-]+)\])?", target)
        if match:
            # tenure is on no package index (doc/install.rst): `pip install
            # tenure[...]` would fetch whatever else bears the name
            assert match.group(1) == ".", \
                f"{what}: tenure is installed from its checkout: pip install -e \".[extra]\""
            assert "-e" in args, f"{what}: install the checkout editable (pip install -e .)"
            for extra in filter(None, (match.group(2) or "").split(",")):
                assert extra in extras, \
                    f"{what}: no extra [{extra}] in setup.cfg (there are {sorted(extras)})"
        else:   # a pinned third-party package: the pin setup.cfg uses
            pins = {req for reqs in extras.values() for req in reqs}
            assert target in pins, f"{what}: {target!r} is not a requirement in setup.cfg"


def _check_python(args: list[str], env_vars: dict[str, str], what: str, tmp_path: Path) -> None:
    env = _env()
    script = args[0] if args else ""
    if args[:2] == ["-m", "tenure.demo"]:
        # Run as written (the docs keep it small enough to run).
        _run([sys.executable, *args], tmp_path, env, what)
    elif args[:3] == ["-m", "tenure", "cache"] and len(args) >= 4:
        # ``info|clear``: each; ``[--verbose]``: with and without.  Against a
        # temporary cache, never the reader's.
        env["TENURE_FLAGS"] = f"compiledir={tmp_path / 'cache'}"
        optional = [a.strip("[]") for a in args[4:] if a.startswith("[")]
        plain = [a for a in args[4:] if not a.startswith("[")]
        for action in args[3].split("|"):
            for extra in ([], optional) if optional else ([],):
                _run([sys.executable, "-m", "tenure", "cache", action, *plain, *extra],
                     tmp_path, env, what)
    elif script.startswith("benchmarks/") and script.endswith(".py"):
        # Not run (minutes, other libraries): the script and its options exist.
        source = ROOT / script
        assert source.is_file(), f"{what}: no {script}"
        code = source.read_text()
        for option in (a for a in args[1:] if a.startswith("--")):
            assert f'"{option}"' in code, f"{what}: {script} has no option {option}"
    elif script in PLACEHOLDER_SCRIPTS and len(args) == 1:
        # The reader's own program, shown for the environment it sets.
        assert env_vars, f"{what}: a placeholder script with nothing to show"
    else:
        pytest.fail(f"{what}: no rule for this python command; add one to {__file__}")


def _check_pytest(args: list[str], env_vars: dict[str, str], what: str) -> None:
    # Not run: it is the test suite itself.  It takes no arguments here, and
    # what the environment sets is read by the tests.
    assert args == [], f"{what}: a pytest command with arguments needs a rule"
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    assert parser["tool:pytest"]["testpaths"].strip() == "tests"
    tests_source = "\n".join(p.read_text() for p in (ROOT / "tests").rglob("*.py"))
    for name in env_vars:
        assert f'"{name}"' in tests_source, f"{what}: no test reads {name}"


def _check_sphinx(args: list[str], what: str) -> None:
    # Not run here: tests/test_docs.py runs both builders with warnings as errors.
    assert len(args) == 4 and args[0] == "-b" and args[1] in {"html", "doctest"}, \
        f"{what}: expected sphinx-build -b html|doctest doc OUTDIR"
    assert args[2] == "doc" and (ROOT / "doc" / "conf.py").is_file(), what
    assert args[3].startswith("doc/_build/"), f"{what}: build into doc/_build (ignored)"


def _check_system_install(words: list[str], what: str) -> None:
    # Not run (it installs system software): packages a test needs.
    assert words[1:2] == ["install"], what
    packages = [w for w in words[2:] if not w.startswith("-")]
    assert packages, what
    for package in packages:
        assert package in SYSTEM_PACKAGES, f"{what}: no test needs the system package {package}"
        user = (ROOT / SYSTEM_PACKAGES[package]).read_text()
        assert package.split("-")[0] in user, f"{what}: {SYSTEM_PACKAGES[package]} does not " \
                                              f"use {package}"


def _check_chmod(words: list[str], what: str, tmp_path: Path) -> None:
    # Run on a stand-in for the placeholder: it must remove group and other write.
    assert words[2:] == ["<directory>"], f"{what}: no rule for these arguments"
    directory = tmp_path / "cache-dir"
    directory.mkdir()
    directory.chmod(0o777)
    _run([*words[:2], str(directory)], tmp_path, _env(), what)
    assert not directory.stat().st_mode & (stat.S_IWGRP | stat.S_IWOTH), what


def check_command(command: Command, tmp_path: Path) -> None:
    """Run or validate one doc command; an AssertionError (or a failure) says why not."""
    what = str(command)
    rest, env_vars = command.text, {}
    while (match := ENV_ASSIGNMENT.match(rest)):
        env_vars[match.group(1)] = match.group(2).strip("\"'")
        rest = rest[match.end():]
    for name, value in env_vars.items():
        if name == "TENURE_FLAGS":
            parse_flags_string(value)     # raises on an unknown flag or a bad value
        elif name not in FOREIGN_ENV:
            source = "\n".join(p.read_text() for folder in ("tenure", "tests", "benchmarks")
                               for p in (ROOT / folder).rglob("*.py"))
            assert f'"{name}"' in source, f"{what}: nothing reads {name}"
    # shlex keeps `info|clear` and `[--verbose]` as written
    words = shlex.split(rest)
    assert words, what
    program, args = words[0], words[1:]
    if program in ("python", "python3"):
        _check_python(args, env_vars, what, tmp_path)
    elif program == "pip":
        _check_pip(args, what)
    elif program == "pytest":
        _check_pytest(args, env_vars, what)
    elif program == "sphinx-build":
        _check_sphinx(args, what)
    elif program in ("apt", "apt-get", "brew", "conda"):
        _check_system_install(words, what)
    elif program == "chmod":
        _check_chmod(words, what, tmp_path)
    else:
        pytest.fail(f"{what}: no rule for the command {program!r}; add one to {__file__}")


# ----------------------------------------------------------------------------
# The tests

COMMANDS = doc_commands()


def test_the_docs_commands_are_found():
    texts = {c.text for c in COMMANDS}
    for expected in ("python -m tenure.demo", "pip install -e .", 'pip install -e ".[test]"',
                     "pytest", "sphinx-build -b html doc doc/_build/html"):
        assert expected in texts, f"{expected!r} not found among {sorted(texts)}"
    wheres = {where.split(":")[0] for c in COMMANDS for where in c.where.split(", ")}
    assert {"README.md", "doc/install.rst"} <= wheres, wheres


@pytest.mark.parametrize("command", COMMANDS, ids=str)
def test_doc_command(command, tmp_path):
    check_command(command, tmp_path)


@pytest.mark.parametrize("text, message", [
    ("python -m tenure.demo --epochs 1 --features 16", "failed"),   # an option it lacks
    ('pip install -e ".[no-such-extra]"', "no extra [no-such-extra]"),
    ("pip install torch==1.0", "not a requirement"),
    ("pip install 'tenure[dask]'", "installed from its checkout"),
    ("pip install .", "editable"),
    ("TENURE_FLAGS=floatx=float32 python my_script.py", "unknown flag"),
    ("TENURE_NO_SUCH_VARIABLE=1 pytest", "nothing reads"),
    ("python benchmarks/run.py --no-such-option", "no option --no-such-option"),
    ("python benchmarks/no_such_script.py", "no benchmarks/no_such_script.py"),
    ("python my_program.py", "no rule"),
    ("sphinx-build -b latex doc doc/_build/latex", "expected sphinx-build"),
    ("apt install cowsay", "no test needs"),
    ("make docs", "no rule for the command 'make'"),
])
def test_a_broken_or_unknown_command_fails(text, message, tmp_path):
    with pytest.raises((AssertionError, pytest.fail.Exception, ValueError)) as info:
        check_command(Command(text, "test"), tmp_path)
    assert message in str(info.value), str(info.value)


def test_commands_are_found_in_every_form(tmp_path):
    rst = tmp_path / "page.rst"
    rst.write_text("Run ``python -m tenure\n   cache info`` or:\n\n"
                   ".. code-block:: console\n\n   $ pip install -e . && pytest\n   output\n\n"
                   "Not a command: ``pytest-xdist``.\n")
    md = tmp_path / "README.md"
    md.write_text("```bash\nTENURE_FLAGS=linker=py python train.py   # comment\n```\n"
                  "Also `pip install -e\n  \".[plot]\"`, not `pip`'s cache.\n")
    rst_found = [(c.text, c.where) for c in _rst_commands(rst, rst.read_text())]
    md_found = [(c.text, c.where) for c in _markdown_commands(md, md.read_text())]
    assert sorted(rst_found) == [("pip install -e .", "page.rst:6"),
                                 ("pytest", "page.rst:6"),
                                 ("python -m tenure cache info", "page.rst:1")]
    assert md_found == [("TENURE_FLAGS=linker=py python train.py", "README.md:2"),
                        ('pip install -e ".[plot]"', "README.md:4"),
                        ("pip", "README.md:5")]


def test_an_unknown_code_block_language_fails(tmp_path):
    rst = tmp_path / "page.rst"
    rst.write_text(".. code-block:: zsh\n\n   make\n")
    with pytest.raises(AssertionError, match="zsh"):
        _rst_commands(rst, rst.read_text())


def test_the_install_page_names_every_requirement_and_extra():
    """doc/install.rst lists what ``pip install -e .`` brings and every extra."""
    page = (ROOT / "doc" / "install.rst").read_text()
    for extra in _extras():
        assert f"``[{extra}]``" in page, f"doc/install.rst does not describe the [{extra}] extra"
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    intro = page.split("From a checkout")[0].lower()
    for requirement in parser["options"]["install_requires"].split():
        name = re.match(r"[A-Za-z0-9_.-]+", requirement).group(0).lower()
        assert name in intro, f"doc/install.rst does not say tenure needs {name}"


def test_install_hints_in_messages_name_installable_things():
    """An error or skip that tells the user what to install must not say
    ``pip install "tenure[extra]"``: tenure is on no package index, so that
    would fetch whatever else bears the name (hints name the packages, or
    ``pip install -e ".[extra]"`` in the source tree)."""
    offenders = [f"{path.relative_to(ROOT)}:{n}"
                 for folder in ("tenure", "tests", "benchmarks")
                 for path in sorted((ROOT / folder).rglob("*.py"))
                 if path.name != Path(__file__).name
                 for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                 if re.search(r"""pip install ['"]?tenure\[""", line)]
    assert not offenders, offenders
