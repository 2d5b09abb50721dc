"""dsv41_flags bootstrap (put first on PYTHONPATH by ``dsv41-flags run``): chain the
``sitecustomize`` that this one shadows, if any, then activate the framework at interpreter start.

The chain is as faithful as the launchers that do the same (coverage.py's and ddtrace's
``sitecustomize``): the user's module is loaded from its exact location with importlib (module or
package form), under the name ``sitecustomize``, and stays ``sys.modules["sitecustomize"]``; its
``sys.path`` edits are kept; only this bootstrap's own directory is taken off ``sys.path``
afterwards, so ``sys.path`` is what plain Python would have (PYTHONPATH entries, empty ones
included). An exception in the user's module is reported as Python's ``site`` reports it
("Error in sitecustomize; ..."), then again as a ``sitecustomize.failed`` event once the framework
is active; it never stops the framework's own activation.
"""
import importlib.machinery
import importlib.util
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
_chain_error = None  # (path, "Type: message") of an exception raised by the user's sitecustomize


def _is_here(entry):
    try:
        return os.path.abspath(entry or os.curdir) == _here
    except (TypeError, ValueError):
        return False


def _chain():
    """Run the first other ``sitecustomize`` on ``sys.path`` as Python's ``site`` would have."""
    global _chain_error
    mine = sys.modules.get("sitecustomize")
    spec = None
    for entry in list(sys.path):
        if not isinstance(entry, str) or _is_here(entry):
            continue
        try:
            spec = importlib.machinery.PathFinder.find_spec("sitecustomize", [entry])
        except (ImportError, ValueError, OSError):
            spec = None
        if spec is not None and spec.loader is not None:
            break
        spec = None
    if spec is not None:
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:  # as site.execsitecustomize: reported, never silent
            if sys.modules.get("sitecustomize") is module:
                del sys.modules["sitecustomize"]
            _chain_error = (spec.origin, f"{type(exc).__name__}: {exc}")
            if sys.flags.verbose:
                sys.excepthook(*sys.exc_info())
            else:
                sys.stderr.write("Error in sitecustomize; set PYTHONVERBOSE for traceback:\n"
                                 f"{type(exc).__name__}: {exc}\n")
    # this bootstrap keeps a name of its own (its directory stays in PYTHONPATH for children)
    if mine is not None:
        sys.modules["dsv41_flags_bootstrap"] = mine
    for i, entry in enumerate(sys.path):
        if isinstance(entry, str) and _is_here(entry):
            del sys.path[i]
            break


def _activate():
    try:
        import dsv41_flags
    except ImportError:  # an interpreter without the package: say so, features are not applied
        sys.stderr.write(f"dsv41_flags: not importable in {sys.executable}: no feature is applied "
                         f"in this process (pid {os.getpid()})\n")
        return
    try:
        dsv41_flags.activate()
    except dsv41_flags.FlagsError as exc:
        sys.stderr.write(f"dsv41_flags: {exc}\n")
        sys.stderr.flush()
        os._exit(3)
    if _chain_error is not None:
        rt = dsv41_flags.runtime()
        if rt is not None:
            rt.log.error("sitecustomize.failed", path=_chain_error[0], error=_chain_error[1],
                         note="the user's sitecustomize raised; dsv41_flags activated anyway")


def _in_spawn_child(activate):
    """In a multiprocessing spawn / forkserver child (``--multiprocessing-fork``), activate when
    the parent's preparation data arrives: its process name is known then (so the first event
    names the process right), and the parent's main module is not imported yet. Returns False
    when this is no such child."""
    if "--multiprocessing-fork" not in sys.argv[1:]:
        return False
    try:
        import multiprocessing
        import multiprocessing.spawn as spawn
    except ImportError:
        return False
    original = spawn.prepare

    def prepare(data):
        spawn.prepare = original
        if isinstance(data, dict) and data.get("name"):
            multiprocessing.current_process().name = data["name"]
        activate()
        return original(data)

    spawn.prepare = prepare
    return True


_chain()
if not _in_spawn_child(_activate):
    _activate()
