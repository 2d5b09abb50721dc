"""dsv41_flags bootstrap (put first on PYTHONPATH by ``dsv41-flags run``): activate the framework at
interpreter start, then chain the ``sitecustomize`` that this one shadows, if any."""
import importlib
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))


def _chain():
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]
    mine = sys.modules.pop("sitecustomize", None)
    try:
        importlib.import_module("sitecustomize")
    except ImportError:
        pass
    finally:
        sys.path[:] = saved
        if mine is not None:
            sys.modules["sitecustomize"] = mine


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


_chain()
_activate()
