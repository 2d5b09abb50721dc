"""Post-import hooks (wrapt): run a callback when a target module is imported, or at once if it
already is. wrapt adds its finder to ``sys.meta_path`` only when a hook is registered, so with
nothing armed the import system is left untouched."""
from __future__ import annotations

from types import ModuleType
from typing import Callable

import wrapt


def register_post_import_hook(callback: Callable[[ModuleType], None], target: str) -> None:
    """Call ``callback(module)`` once ``target`` (dotted name) is imported; at once if it already
    is. Exceptions raised by the callback propagate to the import statement (strict mode)."""
    wrapt.register_post_import_hook(callback, target)
