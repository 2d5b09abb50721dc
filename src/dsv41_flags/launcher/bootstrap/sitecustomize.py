"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

dsv41_flags bootstrap (put first on PYTHONPATH by ``dsv41-flags run``): chain the
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


def _restore_slot(mine):
    """Put this bootstrap's own module back in ``sys.modules["sitecustomize"]`` (or leave the
    slot empty when it was not there: imported by hand, not by ``site``)."""
    if mine is not None:
        sys.modules["sitecustomize"] = mine
    else:
        sys.modules.pop("sitecustomize", None)


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
        except BaseException as exc:  # as site.execsitecustomize: reported, never silent
            # site is still importing THIS module under the name "sitecustomize" and reads
            # sys.modules["sitecustomize"] when that import ends: the slot must hold a module on
            # every path, else site reports a second "Error in sitecustomize ... KeyError". After
            # a failure it holds this bootstrap again (the user's half-run module is dropped, as
            # plain Python drops a module whose import raised).
            _restore_slot(mine)
            if not isinstance(exc, Exception):
                raise  # SystemExit / KeyboardInterrupt: as plain site, not caught
            _chain_error = (spec.origin, f"{type(exc).__name__}: {exc}")
            if sys.flags.verbose:
                sys.excepthook(*sys.exc_info())
            else:
                sys.stderr.write("Error in sitecustomize; set PYTHONVERBOSE for traceback:\n"
                                 f"{type(exc).__name__}: {exc}\n")
        else:
            if sys.modules.get("sitecustomize") is None:  # the user's module removed itself
                sys.modules["sitecustomize"] = module
    # this bootstrap keeps a name of its own (its directory stays in PYTHONPATH for children)
    if mine is not None:
        sys.modules["dsv41_flags_bootstrap"] = mine
    for i, entry in enumerate(sys.path):
        if isinstance(entry, str) and _is_here(entry):
            del sys.path[i]
            break


def _activate():
    """Activation and error policy live in the package (``dsv41_flags.children.bootstrap``): a
    failure is a ``flags.error`` event and, in strict mode, exit status 3 before the program runs."""
    try:
        import dsv41_flags.activation as _activation
        import dsv41_flags.children as _children
    except ImportError:  # an interpreter without the package: say so, features are not applied
        sys.stderr.write(f"dsv41_flags: not importable in {sys.executable}: no feature is applied "
                         f"in this process (pid {os.getpid()})\n")
        return
    except Exception as exc:  # the package is broken here: no event possible, never run unpatched
        sys.stderr.write(f"dsv41_flags: flags.error pid={os.getpid()} entry=bootstrap importing "
                         f"dsv41_flags raised {type(exc).__name__}: {exc}\n")
        sys.stderr.flush()
        if os.environ.get("DSV41_STRICT", "").strip().lower() not in ("0", "false", "off", "no"):
            os._exit(3)
        return
    _children.bootstrap()
    if _chain_error is not None:
        rt = _activation.current_runtime()
        if rt is not None:
            rt.log.error("sitecustomize.failed", path=_chain_error[0], error=_chain_error[1],
                         note="the user's sitecustomize raised; dsv41_flags activated anyway")


_chain()
_activate()
