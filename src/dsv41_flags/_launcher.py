"""``dsv41-flags run``: start a command so that every Python process under it activates at
interpreter start, for engines and tools without a plugin loader."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Mapping, Sequence

from ._runtime import build
from ._names import SNAPSHOT_VAR

BOOTSTRAP_DIR = Path(__file__).resolve().parent / "_bootstrap"
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
    snapshot of this launch and the bootstrap directory first on PYTHONPATH (``python_path``).
    Raises SettingsError / DeclarationError before anything is started."""
    env = dict(os.environ if environ is None else environ)
    env.pop(SNAPSHOT_VAR, None)
    rt = build(settings_files, profile, environ=env, argv=list(argv), use_snapshot=False,
               configure_logging=False)
    env[SNAPSHOT_VAR] = rt.snapshot()
    env["PYTHONPATH"] = python_path(env.get("PYTHONPATH"))
    return rt, env


def launch_environ(settings_files=None, profile=None, argv: Sequence[str] = (),
                   environ=None) -> dict[str, str]:
    """The environment for the command (see ``prepare``)."""
    return prepare(settings_files, profile, argv, environ)[1]


def exec_command(argv: list[str], env: dict[str, str]) -> None:
    """Replace this process by ``argv`` with the launch environment ``env`` (never returns)."""
    sys.stdout.flush()
    sys.stderr.flush()
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
