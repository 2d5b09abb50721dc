"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

The import probe of the static check: a module of the installed environment imported in a
child interpreter with this one's ``sys.path``, no stdin and a time limit, so that whatever the
import does (seconds of torch, a crash, a hang) stays in the child. Two questions are asked:

- ``list_names``: the names of a compiled extension module (``check --live-extensions``);
- ``decide``: the live verdict of requirement texts on a module, by the boot's own rule
  (``drift.verdicts_on``).

Which modules may be imported is the checker's decision (``static_check.Checker.probe_refused``).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

from dsv41_flags.drift import Verdict

#: how long the live look at one compiled module may take (seconds): importing it may import the
#: engine's heavy dependencies (torch) first
EXTENSION_TIMEOUT_S = 300
#: how long deciding requirements on one module of a dependency may take (seconds): importing
#: torch takes about 3 s here, a heavy dependency tens of seconds
PROBE_TIMEOUT_S = 120

#: imports the module named by argv[1] and prints its names as JSON: per name its signature
#: (``[names, has **kwargs]`` or null) and, for a class, ``attrs`` (``dir``) and ``closed`` (no
#: metaclass ``__getattr__`` / ``__getattribute__``)
_LIST_NAMES = r"""
import importlib, inspect, json, sys
m = importlib.import_module(sys.argv[1])
def params(obj):
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    return [list(sig.parameters), any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())]
names = {}
for n in dir(m):
    try:
        obj = getattr(m, n)
    except Exception:
        continue
    entry = {"params": params(obj) if callable(obj) else None}
    if isinstance(obj, type):
        entry["attrs"] = [a for a in dir(obj) if isinstance(a, str)]
        entry["closed"] = not any(k not in (type, object) and ("__getattr__" in vars(k) or
                                  "__getattribute__" in vars(k)) for k in type(obj).__mro__)
    names[n] = entry
listed = getattr(m, "__all__", None)
print(json.dumps({"names": names, "closed": "__getattr__" not in vars(m), "file": m.__file__,
                  "all": [a for a in listed if isinstance(a, str)]
                  if isinstance(listed, (list, tuple)) else None}))
"""

#: imports the module named by argv[1] and prints its file and the live verdict of every
#: requirement text of argv[2:], as JSON
_DECIDE = r"""
import importlib, json, sys
from dsv41_flags.declare import Feature
from dsv41_flags.drift import verdicts_on
m = importlib.import_module(sys.argv[1])
f = Feature(name="probe", target=sys.argv[1], install=lambda m, c: None, summary="probe",
            requires=tuple(sys.argv[2:]), engine="")
print(json.dumps({"file": getattr(m, "__file__", None),
                  "verdicts": [v.to_dict() for v in verdicts_on(f, m)]}))
"""


def run_child(program: str, args: list[str], timeout_s: float) -> dict | str:
    """Run ``program`` (``python -c``) with ``args`` in a child interpreter within
    ``timeout_s`` seconds: the JSON object of its last line of output, or why there is none
    (``args[0]``, the module, named)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if isinstance(p, str))}
    try:
        proc = subprocess.run([sys.executable, "-c", program, *args], capture_output=True,
                              text=True, timeout=timeout_s, stdin=subprocess.DEVNULL, env=env)
    except subprocess.TimeoutExpired:
        return f"importing {args[0]} did not finish within {timeout_s} s"
    except OSError as exc:
        return f"cannot start {sys.executable}: {exc.strerror or exc}"
    try:
        data = json.loads(proc.stdout.strip().splitlines()[-1])
        if not isinstance(data, dict):
            raise ValueError("not an object")
        return data
    except (ValueError, IndexError):
        last = proc.stderr.strip().splitlines()[-1:] or [f"exit code {proc.returncode}"]
        return f"importing {args[0]} failed: {last[0][:300]}"


def _other_file(data: dict, key: str) -> str:
    """Why the child's module is not the file ``key`` the source view found ("" when it is, or
    when ``key`` is empty)."""
    if key and os.path.realpath(str(data.get("file"))) != os.path.realpath(key):
        return f"the child imported {data.get('file')}, not {key}"
    return ""


def list_names(module: str, key: str = "") -> dict | str:
    """The names of compiled module ``module``, imported in a child within
    ``EXTENSION_TIMEOUT_S``: ``{"names": {name: {"params", "attrs", "closed"}}, "all",
    "closed", "file"}``, or why the look failed (also when the child imported another file than
    ``key``)."""
    data = run_child(_LIST_NAMES, [module], EXTENSION_TIMEOUT_S)
    if isinstance(data, str):
        return data
    if not isinstance(data.get("names"), dict):
        return f"importing {module} failed: the child listed no names"
    return _other_file(data, key) or data


def decide(module: str, texts: list[str], key: str = "") -> list[Verdict] | str:
    """The live verdict (``drift.verdicts_on``) of each requirement text on ``module``,
    imported in a child within ``PROBE_TIMEOUT_S``; or why the probe failed (also when the
    child imported another file than ``key``)."""
    data = run_child(_DECIDE, [module, *texts], PROBE_TIMEOUT_S)
    if isinstance(data, str):
        return data
    got = data.get("verdicts")
    if not (isinstance(got, list) and len(got) == len(texts)):
        return f"importing {module} gave no verdicts"
    return _other_file(data, key) or [Verdict(**v) for v in got]
