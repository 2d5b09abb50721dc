"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

``dsv41-flags run``: start a command so that every Python process under it activates at
interpreter start, for engines and tools without a plugin loader."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Mapping, Sequence

from dsv41_flags.assembly import build
from dsv41_flags.names import LAUNCH_VAR, SNAPSHOT_VAR

BOOTSTRAP_DIR = Path(__file__).resolve().parent / "bootstrap"
#: how long ``interpreter_problem`` waits for ``<python> -c "import dsv41_flags"``
IMPORT_CHECK_TIMEOUT_S = 30.0
#: a command whose program is a Python interpreter: python, python3, python3.11, ...
_PYTHON = re.compile(r"python[0-9]*(\.[0-9]+)*")


def python_path(current: str | None) -> str:
    """``PYTHONPATH`` for the command: the bootstrap directory first, then every entry of
    ``current`` exactly as written (an empty entry means the current directory and is kept;
    ``":/opt/x"`` stays ``"<bootstrap>::/opt/x"``); a bootstrap entry already there (a nested
    ``run``) is not repeated. An unset or empty ``current`` adds no entry."""
    entries = current.split(os.pathsep) if current else []
    return os.pathsep.join([str(BOOTSTRAP_DIR)] + [p for p in entries if p != str(BOOTSTRAP_DIR)])


def prepare(settings_files=None, profile=None, argv: Sequence[str] = (), environ=None):
    """Resolve this launch once, here, with the command's argv for the fingerprint.

    Returns ``(runtime, env)``: the runtime (not armed) and the environment for the command: the
    snapshot of this launch with its marker (``Runtime.export``) and the bootstrap directory first on PYTHONPATH (``python_path``).
    Raises SettingsError / DeclarationError before anything is started."""
    env = dict(os.environ if environ is None else environ)
    env.pop(SNAPSHOT_VAR, None)
    env.pop(LAUNCH_VAR, None)
    rt = build(settings_files, profile, environ=env, argv=list(argv), use_snapshot=False,
               configure_logging=False)
    rt.export(env)
    env["PYTHONPATH"] = python_path(env.get("PYTHONPATH"))
    return rt, env


def launch_environ(settings_files=None, profile=None, argv: Sequence[str] = (),
                   environ=None) -> dict[str, str]:
    """The environment for the command (see ``prepare``)."""
    return prepare(settings_files, profile, argv, environ)[1]


def exec_command(argv: list[str], env: dict[str, str]) -> None:
    """Replace this process by ``argv`` with the launch environment ``env`` (never returns).
    What this process wrote is flushed first; a closed or broken stream (None, a reader that quit,
    a full device) does not keep the command from starting. Raises OSError from ``exec``."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    os.execvpe(argv[0], argv, env)


def interpreter_problem(argv: Sequence[str], env: Mapping[str, str],
                        timeout: float = IMPORT_CHECK_TIMEOUT_S) -> str | None:
    """When ``argv`` runs a Python interpreter (its program's file name is ``python``,
    ``python3``, ``python3.11``, ...), check that this interpreter can import dsv41_flags, as the
    bootstrap will have to: ``<interpreter> -c "import dsv41_flags"`` with ``env`` (the launch's
    environment before the bootstrap is added, so the check activates nothing), at most
    ``timeout`` seconds. The interpreter is resolved with the child's ``PATH``
    (``shutil.which``), as ``exec`` will resolve it.

    Returns None when it imports, when the command is no Python interpreter, or when the program
    is not found (``exec`` reports that); else one sentence naming the interpreter and the fix
    (an interpreter of another environment, e.g. the system python when the virtual environment
    is not activated, cannot apply any feature). A check that did not finish says so."""
    if not argv or not _PYTHON.fullmatch(Path(argv[0]).name):
        return None
    exe = shutil.which(argv[0], path=env.get("PATH", os.defpath))
    if exe is None:
        return None
    try:
        proc = subprocess.run([exe, "-c", "import dsv41_flags"], env=dict(env), timeout=timeout,
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, errors="replace")
    except subprocess.TimeoutExpired:
        return (f"could not check that {exe} imports dsv41_flags (no answer within {timeout:g} s)")
    except OSError as exc:
        return f"could not run {exe} to check that it imports dsv41_flags: {exc.strerror or exc}"
    if proc.returncode == 0:
        return None
    last = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
    return (f"the interpreter {exe} cannot import dsv41_flags ({last}): no feature would be "
            f"applied in its processes. Run the Python of the environment where dsv41_flags is "
            f"installed ({sys.executable}, or activate that environment first: "
            f"source {Path(sys.executable).parent}/activate)")


#: a program that is a Python interpreter: python, python3, python3.11, pypy3, ...
_PYTHON_NAME = re.compile(r"(python|pypy)[0-9]*(\.[0-9]+)*")
#: interpreter options that keep the bootstrap from running -> why (checked on CPython 3.11:
#: ``-s`` and ``PYTHONNOUSERSITE`` only drop the user site directory, not ``PYTHONPATH``)
BYPASS_OPTIONS = {
    "E": "ignores every PYTHON* variable, so PYTHONPATH (where the bootstrap sitecustomize is) "
         "is not read",
    "I": "isolated mode: implies -E (PYTHONPATH, where the bootstrap sitecustomize is, is not read)",
    "S": "does not import the site module, so no sitecustomize (the bootstrap) runs",
}
#: single-letter interpreter options that take a value (``-W arg``, ``-Werror``)
_VALUE_OPTIONS = "WX"


def interpreter_options(argv: Sequence[str]) -> list[str] | None:
    """The single-letter options a Python command line gives its interpreter, in order (``python
    -Es -X dev r.py`` -> ``["E", "s", "X"]``), read as CPython reads them: joined letters (-IS),
    ``-W``/``-X`` with an attached or a separate value, up to ``-c``/``-m`` (included), the script,
    ``-`` or ``--``. None when ``argv[0]`` is no Python interpreter (by its file name)."""
    if not argv or not _PYTHON_NAME.fullmatch(Path(argv[0]).name):
        return None
    letters: list[str] = []
    i = 1
    while i < len(argv):
        token = argv[i]
        if not token.startswith("-") or token in ("-", "--"):
            break
        if token.startswith("--"):  # --check-hash-based-pycs MODE, --help, --version
            i += 2 if token == "--check-hash-based-pycs" else 1
            continue
        skip = 1
        for j, letter in enumerate(token[1:], start=1):
            letters.append(letter)
            if letter in "cm":
                return letters
            if letter in _VALUE_OPTIONS:
                skip = 1 if token[j + 1:] else 2
                break
        i += skip
    return letters


def _shebang(program: str, env: Mapping[str, str]) -> list[str] | None:
    """The interpreter line of the script ``program`` (``#!/usr/bin/python3 -I`` -> ``[
    "/usr/bin/python3", "-I"]``; ``/usr/bin/env [-S] python3 -E`` -> ``["python3", "-E"]``), or
    None. Reads at most 256 bytes of a regular file, never blocks, never raises."""
    import shutil
    import stat

    try:
        path = shutil.which(program, path=env.get("PATH", os.defpath)) or program
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            head = os.read(fd, 256) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
        finally:
            os.close(fd)
    except (OSError, ValueError):
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split()
    if words and Path(words[0]).name == "env":
        words = [w for w in words[1:] if w != "-S"]
    return words or None


def bootstrap_bypass(argv: Sequence[str], env: Mapping[str, str] | None = None) -> str | None:
    """Why the Python command ``argv`` would run without the bootstrap (unpatched and silent), or
    None. An interpreter option in ``BYPASS_OPTIONS`` (``-E``, ``-I``, ``-S``, also joined: ``-Es``,
    ``-IS``) given on the command line, or on the interpreter line of a script run directly
    (``#!/usr/bin/python3 -I``)."""
    env = os.environ if env is None else env
    for where, words in (("", list(argv)), ("the interpreter line of ", None)):
        if words is None:
            if not argv or interpreter_options(argv) is not None:
                return None
            words = _shebang(argv[0], env)
            if not words:
                return None
            where += f"{argv[0]} ({' '.join(words)})"
            words = words + ["script"]
        for letter in interpreter_options(words) or []:
            if letter in BYPASS_OPTIONS:
                return (f"interpreter option -{letter} on {where or 'the command line'}: "
                        f"{BYPASS_OPTIONS[letter]}; that Python process would run with no feature "
                        f"applied and no event saying so. Drop -{letter} (-s, which keeps the user "
                        f"site directory out, still runs the bootstrap)")
    return None
