"""Scaffolding for tests that run a whole process (a fresh interpreter, ``dsv41-flags run``, a
fork): a demo target module, a features dir, a settings file arming a feature, an environment
without the caller's ``DSV41_*`` variables, and the JSON events a process wrote to stderr."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from dsv41_flags.runtime import build

CLI = str(Path(sys.executable).with_name("dsv41-flags"))


FEATURE = """
from dsv41_flags import Feature, Option
def install(module, ctx):
    n = ctx.options["n"]
    assert isinstance(n, int), n
    ctx.patch(module.Worker, "forward", lambda orig: (lambda self: f"patched n={n}"))
FEATURE = Feature(name="demo_patch", target=TARGET, install=install, summary="demo",
                  requires=("Worker.forward",), engine="",
                  options=(Option("n", "int", 4, minimum=1, maximum=8),))
"""


def parent(project, **env):
    return build([project.settings], None, environ=dict(env), argv=["prog"], features_dir=project.feats,
                 use_snapshot=False, configure_logging=False)


def child(raw: str, **env):
    return build(None, None, environ={"DSV41_SNAPSHOT": raw, **env}, argv=["prog"],
                 configure_logging=False)


def events(stderr: str) -> list[dict]:
    out = []
    for line in stderr.splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if isinstance(e, dict):
            out.append(e)
    return out


def run_py(project, code: str, timeout=120, **env) -> subprocess.CompletedProcess:
    e = dict(project.env)
    e.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e, cwd=project.dir,
                          capture_output=True, text=True, timeout=timeout)


PROGRAM_FEATURE = """
from dsv41_flags import Feature, Option
def install(module, ctx):
    ctx.patch(module.Worker, "forward", lambda orig: (lambda self: "patched " + repr(ctx.options["tag"])))
FEATURE = Feature(name="demo_fix", target=TARGET, install=install, summary="demo",
                  requires=("Worker.forward",), engine="",
                  options=(Option("tag", "str", "x"), Option("mode", "choice", "a", choices=("a", "b")),
                           Option("names", "list", ())))
"""


REPO = Path(__file__).resolve().parents[2]


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSV41_")}
    env.update(extra)
    return env


def run_cmd(argv, env, cwd, **kw):
    return subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL, **kw)


def event_names(stderr):
    out = []
    for line in stderr.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return [e.get("event") for e in out if isinstance(e, dict)]
