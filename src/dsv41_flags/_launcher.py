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


def launch_environ(settings_files=None, profile=None, argv: Sequence[str] = (),
                   environ=None) -> dict[str, str]:
    """The environment for the command: the snapshot of this launch (resolved once, here, with the
    command's argv for the fingerprint) and the bootstrap directory first on PYTHONPATH.
    Raises SettingsError / DeclarationError before anything is started."""
    env = dict(os.environ if environ is None else environ)
    env.pop(SNAPSHOT_VAR, None)
    rt = build(settings_files, profile, environ=env, argv=list(argv), use_snapshot=False,
               configure_logging=False)
    env[SNAPSHOT_VAR] = rt.snapshot()
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(BOOTSTRAP_DIR)]
    env["PYTHONPATH"] = os.pathsep.join([str(BOOTSTRAP_DIR)] + paths)
    return env


def exec_command(argv: list[str], settings_files=None, profile=None) -> None:
    """Replace this process by ``argv`` with the launch environment (never returns)."""
    env = launch_environ(settings_files, profile, argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvpe(argv[0], argv, env)
