"""Scaffolding for tests that run a whole process (a fresh interpreter, ``dsv41-flags run``, a
fork): a demo target module, a features dir, a settings file arming a feature, an environment
without the caller's ``DSV41_*`` variables, and the JSON events a process wrote to stderr.

Every process started here inherits the session's ``HOME`` (a temporary directory) and
``XDG_CACHE_HOME`` (``<repo>/.cache``) set by ``tests/conftest.py``, and every run is bounded by a
timeout."""

import json
import os
import subprocess
import sys
import textwrap
import types
import uuid
from pathlib import Path

from dsv41_flags.assembly import build

from ..conftest import REPO

__all__ = ["CLI", "FEATURE", "PROGRAM_FEATURE", "REPO", "WORKER", "child", "clean_env", "event_names",
           "events", "make_project", "parent", "run_cmd", "run_code", "run_py", "write_project"]

#: the installed ``dsv41-flags`` command beside this interpreter
CLI = str(Path(sys.executable).with_name("dsv41-flags"))

#: a target module's source: ``Worker().forward()`` returns ``'stock'`` until a feature patches it
WORKER = "class Worker:\n    def forward(self):\n        return 'stock'\n"

#: ``demo_patch``: patches ``Worker.forward`` to return ``f"patched n={n}"``; int option ``n`` in
#: [1, 8] (default 4); ``TARGET`` is replaced by the target module's name
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

#: ``demo_fix``: patches ``Worker.forward`` to return ``"patched " + repr(tag)``; options ``tag``
#: (str), ``mode`` (choice a / b) and ``names`` (list); ``TARGET`` as above
PROGRAM_FEATURE = """
from dsv41_flags import Feature, Option
def install(module, ctx):
    ctx.patch(module.Worker, "forward", lambda orig: (lambda self: "patched " + repr(ctx.options["tag"])))
FEATURE = Feature(name="demo_fix", target=TARGET, install=install, summary="demo",
                  requires=("Worker.forward",), engine="",
                  options=(Option("tag", "str", "x"), Option("mode", "choice", "a", choices=("a", "b")),
                           Option("names", "list", ())))
"""


def clean_env(**extra: str) -> dict[str, str]:
    """``os.environ`` without any ``DSV41_*`` variable of the caller, updated with ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSV41_")}
    env.update(extra)
    return env


def write_project(directory: Path, feature: str, source: str, settings: str | None, *,
                  target: str | None = None, target_source: str = WORKER) -> types.SimpleNamespace:
    """Write ``<target>.py`` (``target_source``), ``features/<feature>.py`` (``source`` with
    ``TARGET`` replaced by ``repr(target)``) and ``settings.toml`` (``settings``, with
    ``FEATURES_DIR`` replaced by the features directory) into ``directory``. ``target`` defaults to
    a fresh ``demo_engine_<hex>`` name; ``settings=None`` writes no settings file (a test that
    builds its runtime with ``make_runtime`` writes its own). Returns a namespace ``dir, feats,
    settings, target``."""
    target = target or f"demo_engine_{uuid.uuid4().hex[:8]}"
    (directory / f"{target}.py").write_text(target_source)
    feats = directory / "features"
    feats.mkdir(exist_ok=True)
    (feats / f"{feature}.py").write_text(source.replace("TARGET", repr(target)))
    settings_file = directory / "settings.toml"
    if settings is not None:
        settings_file.write_text(settings.replace("FEATURES_DIR", str(feats)))
    return types.SimpleNamespace(dir=directory, feats=feats, settings=settings_file, target=target)


def make_project(directory: Path, feature: str, source: str, settings: str, **kw) -> types.SimpleNamespace:
    """``write_project`` plus ``env``: a clean environment naming the settings file
    (``DSV41_SETTINGS``), the target's directory first on ``PYTHONPATH`` (then the caller's: a
    worktree's package, as the test's own), and JSON log lines."""
    project = write_project(directory, feature, source, settings, **kw)
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    project.env = clean_env(DSV41_SETTINGS=str(project.settings), DSV41_LOG_FORMAT="json",
                            PYTHONPATH=os.pathsep.join([str(directory)] + inherited))
    return project


def parent(project, **env):
    """The launch's runtime for ``project``, built in this process (no snapshot, no logging)."""
    return build([project.settings], None, environ=dict(env), argv=["prog"], features_dir=project.feats,
                 use_snapshot=False, configure_logging=False)


def child(raw: str, **env):
    """A child's runtime built from the snapshot ``raw`` (``DSV41_SNAPSHOT``) and ``env``."""
    return build(None, None, environ={"DSV41_SNAPSHOT": raw, **env}, argv=["prog"],
                 configure_logging=False)


def events(stderr: str) -> list[dict]:
    """Every JSON event object in ``stderr`` (processes writing one pipe at once may share lines)."""
    decoder, out, i = json.JSONDecoder(), [], 0
    while (i := stderr.find('{"', i)) != -1:
        try:
            obj, i = decoder.raw_decode(stderr, i)
        except ValueError:
            i += 1
            continue
        if isinstance(obj, dict) and "event" in obj:
            out.append(obj)
    return out


def event_names(stderr: str) -> list[str]:
    """The ``event`` of every JSON event in ``stderr``, in order."""
    return [e["event"] for e in events(stderr)]


def run_cmd(argv, env, cwd, timeout=120, **kw) -> subprocess.CompletedProcess:
    """Run ``argv`` (text, output captured, no stdin), bounded by ``timeout`` seconds."""
    return subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, **kw)


def run_code(code: str, env, cwd, timeout=120) -> subprocess.CompletedProcess:
    """Run ``python -c code`` (``code`` dedented) with this interpreter, as ``run_cmd``."""
    return run_cmd([sys.executable, "-c", textwrap.dedent(code)], env, cwd, timeout)


def run_py(project, code: str, timeout=120, **env) -> subprocess.CompletedProcess:
    """``run_code`` in ``project``'s directory with its environment updated with ``env``."""
    return run_code(code, {**project.env, **env}, project.dir, timeout)


#: a feature ``cap_new_tokens`` patching ``Worker.forward`` of TARGET, with options cap and ratio
DEMO_FEATURE = """
from dsv41_flags import Feature, Option
def install(module, ctx):
    cap = ctx.options["cap"]
    ctx.patch(module.Worker, "forward", lambda orig: (lambda self: f"patched {cap}"))
FEATURE = Feature(name="cap_new_tokens", target=TARGET, install=install, summary="demo",
                  requires=REQUIRES, engine="",
                  options=(Option("cap", "int", 512, minimum=1, maximum=4096),
                           Option("ratio", "float", 0.5, minimum=0.0, maximum=1.0)))
"""


def demo_launch(directory: Path) -> types.SimpleNamespace:
    """``make_project`` of ``DEMO_FEATURE`` (flag off) in ``directory``, plus
    ``feature(requires=..., target=...)``, which rewrites the feature file."""
    launch = make_project(directory, "cap_new_tokens",
                          DEMO_FEATURE.replace("REQUIRES", repr(("Worker.forward",))),
                          "[default]\ncap_new_tokens = false\n")

    def feature(requires=("Worker.forward",), target=launch.target):
        (launch.feats / "cap_new_tokens.py").write_text(
            DEMO_FEATURE.replace("TARGET", repr(target)).replace("REQUIRES", repr(tuple(requires))))

    launch.feature = feature
    return launch
