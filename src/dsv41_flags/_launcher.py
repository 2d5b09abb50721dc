"""``dsv41-flags run``: start a command so that every Python process under it activates at
interpreter start, for engines and tools without a plugin loader."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Sequence

from ._runtime import build
from ._names import SNAPSHOT_VAR

BOOTSTRAP_DIR = Path(__file__).resolve().parent / "_bootstrap"


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
