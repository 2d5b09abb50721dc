"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

Post-import hooks (wrapt): run a callback when a target module is imported, or at once if it
already is. wrapt adds its finder to ``sys.meta_path`` only when a hook is registered, so with
nothing armed the import system is left untouched.

A target may be in ``sys.modules`` with its body still running: another thread is importing it,
or this thread is, further up its stack. It is never patched half-way (its body would go on and
rebind what was patched). No public API tells a completed module from one still executing, so
registration asks the import system itself: a probe thread calls ``importlib.import_module``,
which returns at once for a completed module and blocks on the module's import lock while an
import of it is in progress (Python's per-module import locks). A probe that has not returned
within ``PROBE_S`` seconds is an import in progress: registration returns an ``ImportWait`` and
the probe thread runs the callback once that import completes. The probe never loads anything: a
finder put first on ``sys.meta_path`` once (``_ProbeGuard``) refuses every import of a probe thread, so when
the import in progress fails (the module leaves ``sys.modules``) the probe registers the hook for
the next import instead. The probe is one way the wait ends, not the only one: the runtime also
settles a pending install itself (``Runtime.settle``: before a fork, at an audit) once
``ImportWait.completed`` is set, so a process forked meanwhile never depends on a thread it did
not inherit.
"""
from __future__ import annotations

import importlib
import importlib.abc
import sys
import threading
from types import ModuleType
from typing import Callable

import wrapt

#: how long registration waits for its probe before it treats the target's import as in
#: progress (seconds); a completed module answers in microseconds
PROBE_S = 1.0


class _ProbeGuard(importlib.abc.MetaPathFinder):
    """A ``sys.meta_path`` finder that refuses every import made by a probe thread (one whose
    ``probing`` flag is set), so a probe only ever waits for an import in progress and never
    loads a module itself; every other import passes through untouched (``None``: not mine)."""

    def __init__(self) -> None:
        self.probing = threading.local()

    def find_spec(self, fullname, path=None, target=None):
        if getattr(self.probing, "active", False):
            raise ModuleNotFoundError(f"dsv41_flags' import probe loads nothing ({fullname})",
                                      name=fullname)
        return None

    def install(self) -> None:
        """Put this guard first on ``sys.meta_path`` unless it is there. It is never removed:
        removing an entry while another thread walks the list could make that thread skip a
        finder (inserting at most makes it ask one finder twice, as wrapt's own finder does)."""
        if self not in sys.meta_path:
            sys.meta_path.insert(0, self)


#: the one probe guard of this process (installed at the first probe)
_GUARD = _ProbeGuard()


class ImportWait:
    """A post-import hook waiting for an import of its target that was in progress when it was
    registered. ``completed`` (threading.Event) is set once that import has completed or failed;
    the probe thread then runs the callback (or, after a failure, registers it for the next
    import)."""

    def __init__(self, callback: Callable[[ModuleType], None], target: str, *,
                 handed_off: bool = False) -> None:
        self.callback, self.target = callback, target
        self.completed = threading.Event()
        self.module: ModuleType | None = None
        self._lock = threading.Lock()
        self._handed_off = handed_off
        self.thread = threading.Thread(target=self._probe, name=f"dsv41-flags-wait-{target}",
                                       daemon=True)

    def _probe(self) -> None:
        _GUARD.install()
        _GUARD.probing.active = True
        try:
            module = importlib.import_module(self.target)  # blocks while an import is in progress
        except BaseException:  # that import failed: the module left sys.modules
            module = None
        finally:
            _GUARD.probing.active = False  # the callback below may import what it needs
        with self._lock:
            self.module = module
            self.completed.set()
            mine = self._handed_off
        if mine:
            self.finish()

    def hand_off(self) -> bool:
        """Leave the callback to the probe thread (it runs it once the import completes). Returns
        False when the probe has already returned: the caller runs ``finish`` itself."""
        with self._lock:
            if self.completed.is_set():
                return False
            self._handed_off = True
            return True

    def finish(self) -> None:
        """Run the callback on the completed module, or register it for the next import when the
        import in progress failed. Exceptions raised by the callback propagate."""
        if self.module is not None:
            self.callback(self.module)
        else:
            wrapt.register_post_import_hook(self.callback, self.target)


def register_post_import_hook(callback: Callable[[ModuleType], None],
                              target: str) -> ImportWait | None:
    """Call ``callback(module)`` once ``target`` (dotted name) is imported; at once (in this
    thread) if it already is. Exceptions raised by the callback propagate to the import statement
    (or to this call when it fires at once). Returns None, or an ``ImportWait`` when an import of
    the target is in progress (probed for ``PROBE_S`` seconds, see the module docstring): the
    callback then runs in the probe thread as soon as that import completes."""
    if sys.modules.get(target) is None:
        wrapt.register_post_import_hook(callback, target)
        return None
    wait = ImportWait(callback, target)
    wait.thread.start()
    if wait.completed.wait(PROBE_S) or not wait.hand_off():
        wait.finish()
        return None
    return wait


def watch_import(callback: Callable[[ModuleType], None], target: str) -> ImportWait:
    """An ``ImportWait`` for ``target`` started and handed off at once, without probing first: in
    a forked child, for a wait whose probe thread stayed in the parent. The callback runs in the
    new probe thread once the import completes (at once if it already has)."""
    wait = ImportWait(callback, target, handed_off=True)
    wait.thread.start()
    return wait


class _ReloadLoader(importlib.abc.Loader):
    """The loader a reload of a watched module runs through: the module's own loader executes it
    (and stays the module's ``__loader__`` / ``__spec__.loader``), then the watch's callbacks run
    on the re-executed module, also when its body raised (what it rebound before is the truth)."""

    def __init__(self, loader, done: Callable[[ModuleType], None]) -> None:
        self.loader, self.done = loader, done

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        for holder, name in ((module, "__loader__"), (getattr(module, "__spec__", None), "loader")):
            if getattr(holder, name, None) is self:
                try:
                    setattr(holder, name, self.loader)
                except AttributeError:
                    pass
        try:
            self.loader.exec_module(module)
        finally:
            self.done(module)

    def __getattr__(self, name: str):
        return getattr(self.loader, name)  # get_code, is_package, get_resource_reader, ...


class _ReloadWatch(importlib.abc.MetaPathFinder):
    """A ``sys.meta_path`` finder that sees ``importlib.reload`` of a watched module: a reload
    asks every finder with ``target`` = the module object (a first import passes None, and is
    left alone: wrapt's finder handles it). It finds the module's spec through the other finders,
    as the import system would, and returns it with its loader wrapped (``_ReloadLoader``)."""

    def __init__(self) -> None:
        self.callbacks: dict[str, list[Callable[[ModuleType], None]]] = {}
        self.lock = threading.Lock()
        self.finding = threading.local()

    def find_spec(self, fullname, path=None, target=None):
        if target is None or fullname not in self.callbacks or getattr(self.finding, "active", False):
            return None
        self.finding.active = True
        try:
            spec = None
            for finder in list(sys.meta_path):
                find = getattr(finder, "find_spec", None)
                if finder is self or find is None:
                    continue
                spec = find(fullname, path, target)
                if spec is not None:
                    break
        finally:
            self.finding.active = False
        if spec is None or not hasattr(spec.loader, "exec_module"):
            return None  # let the import system report it as it would without us
        spec.loader = _ReloadLoader(spec.loader, lambda module: self._reloaded(fullname, module))
        return spec

    def _reloaded(self, name: str, module: ModuleType) -> None:
        with self.lock:
            callbacks = list(self.callbacks.get(name, ()))
        for callback in callbacks:
            callback(module)

    def watch(self, callback: Callable[[ModuleType], None], target: str) -> Callable[[], None]:
        with self.lock:
            self.callbacks.setdefault(target, []).append(callback)
            if self not in sys.meta_path:
                sys.meta_path.insert(0, self)  # never removed: see _ProbeGuard.install

        def cancel() -> None:
            with self.lock:
                left = [c for c in self.callbacks.get(target, ()) if c is not callback]
                if left:
                    self.callbacks[target] = left
                else:
                    self.callbacks.pop(target, None)

        return cancel


#: the one reload watch of this process (put on ``sys.meta_path`` at the first ``watch_reload``)
_RELOADS = _ReloadWatch()


def watch_reload(callback: Callable[[ModuleType], None], target: str) -> Callable[[], None]:
    """Call ``callback(module)`` each time ``importlib.reload`` re-executes module ``target``
    (dotted name), in the reloading thread, right after the module's body ran (also when it
    raised). wrapt's post-import hooks fire once, at the first import, and never on a reload: a
    reload re-executes the body in the same module object, rebinding every name a patch had
    replaced. Returns a function that cancels the watch. Exceptions raised by the callback
    propagate to the ``reload`` call. The watch's finder is put on ``sys.meta_path`` by the first
    call only (nothing installed: the import system is untouched); from then on every other
    import asks it once and is answered at once (``target`` is None)."""
    return _RELOADS.watch(callback, target)
