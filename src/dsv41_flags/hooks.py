"""Post-import hooks (wrapt): run a callback when a target module is imported, or at once if it
already is. wrapt adds its finder to ``sys.meta_path`` only when a hook is registered, so with
nothing armed the import system is left untouched.

A target another thread is still importing (in ``sys.modules`` but its ``__spec__._initializing``
is True) is never patched half-way (its body would go on and rebind what was patched): the
callback runs when that import completes, from a helper thread that waits on the module's import
lock (so never the importing thread itself, and it holds no other lock: no deadlock); if that
import fails, the hook waits for the next import of the target.
"""
from __future__ import annotations

import sys
import threading
import time
from types import ModuleType
from typing import Callable

import wrapt

#: ``register_post_import_hook`` results
NOW_OR_LATER = "registered"
AFTER_IMPORT_IN_PROGRESS = "waiting"


def initializing(module) -> bool:
    """True while ``module`` is being executed by an import (``__spec__._initializing``)."""
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


def register_post_import_hook(callback: Callable[[ModuleType], None], target: str) -> str:
    """Call ``callback(module)`` once ``target`` (dotted name) is imported; at once if it already
    is. Exceptions raised by the callback propagate to the import statement (or to ``register``
    when it fires at once). Returns ``"registered"``, or ``"waiting"`` when the target is being
    imported by another import in progress: the callback then runs in a helper thread as soon as
    that import completes (see the module docstring)."""
    module = sys.modules.get(target)
    if module is not None and initializing(module):
        thread = threading.Thread(target=_after_import, args=(callback, target),
                                  name=f"dsv41-flags-wait-{target}", daemon=True)
        thread.start()
        return AFTER_IMPORT_IN_PROGRESS
    wrapt.register_post_import_hook(callback, target)
    return NOW_OR_LATER


def _wait_for_import(target: str) -> None:
    """Block until no import of ``target`` is in progress (its module lock is free)."""
    try:
        from importlib._bootstrap import _lock_unlock_module
    except ImportError:  # pragma: no cover - CPython 3.11-3.13 have it
        _lock_unlock_module = None
    if _lock_unlock_module is not None:
        try:
            _lock_unlock_module(target)
            return
        except Exception:
            pass
    while initializing(sys.modules.get(target)):  # pragma: no cover - fallback
        time.sleep(0.005)


def _after_import(callback: Callable[[ModuleType], None], target: str) -> None:
    _wait_for_import(target)
    module = sys.modules.get(target)
    if module is not None and not initializing(module):
        callback(module)
    else:  # that import failed (the module was removed): install at the next import
        wrapt.register_post_import_hook(callback, target)
