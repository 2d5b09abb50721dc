"""Post-import hooks (wrapt): run a callback when a target module is imported, or at once if it
already is. wrapt adds its finder to ``sys.meta_path`` only when a hook is registered, so with
nothing armed the import system is left untouched.

A target another thread is still importing (in ``sys.modules``, its body still running) is never
patched half-way (its body would go on and rebind what was patched): ``register_post_import_hook``
says so (``AFTER_IMPORT_IN_PROGRESS``) and a helper thread runs the callback once that import
completes (it looks every ``POLL_S`` seconds and holds no lock, so it never deadlocks with the
importing thread). The helper is one way the wait ends, not the only one: the
runtime also settles a pending install itself wherever it looks (``Runtime.settle``: before a
fork, at an audit), so a process forked meanwhile never depends on a thread it did not inherit.
If that import fails, the hook waits for the next import of the target.
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
#: how often the helper thread looks whether an import in progress has completed (seconds)
POLL_S = 0.005


def initializing(module: ModuleType | None) -> bool:
    """True while ``module``'s body is being executed by an import in progress."""
    # No public API says whether a module in sys.modules is still being executed: CPython's
    # import machinery marks it on its spec (``__spec__._initializing``), read here and nowhere else.
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


def _after_import(callback: Callable[[ModuleType], None], target: str) -> None:
    while initializing(sys.modules.get(target)):  # never imports the target itself
        time.sleep(POLL_S)
    module = sys.modules.get(target)
    if module is not None:
        callback(module)
    else:  # that import failed (the module was removed): install at the next import
        wrapt.register_post_import_hook(callback, target)
