"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

Wrappers that keep a function's kind.

A wrapper the framework puts around an engine function (``ctx.patch(..., guard=True)``, a live
feature's bypass) must be of the same kind as the function it stands for: sglang's tokenizer and
HTTP layers dispatch on ``inspect.iscoroutinefunction`` and friends, and an ``async def`` or a
generator only runs its code (and raises) when awaited or iterated, so a guard around the *call*
would guard nothing. The kinds:

- ``FUNCTION``: anything callable that is none of the others (a function, a method, a class);
- ``COROUTINE``: an ``async def`` (``inspect.iscoroutinefunction``);
- ``GENERATOR``: a ``def`` with ``yield`` (``inspect.isgeneratorfunction``);
- ``ASYNC_GENERATOR``: an ``async def`` with ``yield`` (``inspect.isasyncgenfunction``).

Where it is stored, an attribute has a kind too (``stored_kind``: classmethod, staticmethod,
property, callable, plain value, another descriptor); a patch keeps it (``dsv41_flags.patch``).

A function or coroutine wrapper is a plain ``def`` / ``async def`` written by its policy (the
guard in ``dsv41_flags.patch``, the gate in ``dsv41_flags.live``). A generator wrapper is built
here (``generator_wrapper`` / ``async_generator_wrapper``): it delegates to the iterator of the
call it chose, with PEP 380 semantics (``send``, ``throw``, ``close`` and the return value pass
through; ``asend`` / ``athrow`` / ``aclose`` for async generators), and runs the call and every
resume of the iterator inside ``with step(thrown):``, the policy's context manager (a guard's
exception handling, a gate's pinned state). A step's ``__exit__`` may raise ``FallBack`` before
the first item to restart the iteration on another call (the guard's fallback to the original).

wrapt's ``FunctionWrapper`` keeps introspection too, but a proxy costs about 3-4 times a plain
closure per call on a bound method (bench/b3_patched_call.py measures the patched call), and it
would still need these drivers to act while a coroutine or generator runs: the framework uses
plain wrappers of the right kind and ``__wrapped__`` instead.
"""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

FUNCTION = "function"
COROUTINE = "coroutine function"
GENERATOR = "generator function"
ASYNC_GENERATOR = "async generator function"


def kind_of(fn: Any) -> str:
    """The kind of ``fn``: ``COROUTINE``, ``ASYNC_GENERATOR``, ``GENERATOR`` or ``FUNCTION``
    (methods, ``functools.partial`` and classmethod/staticmethod functions by what they call)."""
    if isinstance(fn, (classmethod, staticmethod)):
        fn = fn.__func__
    if inspect.iscoroutinefunction(fn):
        return COROUTINE
    if inspect.isasyncgenfunction(fn):
        return ASYNC_GENERATOR
    if inspect.isgeneratorfunction(fn):
        return GENERATOR
    return FUNCTION


#: the kinds of stored attribute (``stored_kind``) a patch keeps
CLASSMETHOD, STATICMETHOD, PROPERTY, CALLABLE, VALUE = (
    "classmethod", "staticmethod", "property", "function or other callable", "plain value")


def stored_kind(value: Any) -> str:
    """How ``value`` behaves where it is stored (in a class, how instances see it): ``CLASSMETHOD``,
    ``STATICMETHOD``, ``PROPERTY`` (also a subclass of ``property``), ``CALLABLE`` (a function, a
    method, a builtin, a class, a callable object), ``VALUE`` (neither callable nor a descriptor),
    else ``"descriptor <type>"`` for any other descriptor (``functools.cached_property``...)."""
    if isinstance(value, classmethod):
        return CLASSMETHOD
    if isinstance(value, staticmethod):  # before CALLABLE: a staticmethod is callable
        return STATICMETHOD
    if isinstance(value, property):
        return PROPERTY
    if callable(value):
        return CALLABLE
    if hasattr(type(value), "__get__"):
        return f"descriptor {type(value).__module__}.{type(value).__qualname__}"
    return VALUE


def call_kind(fn: Any) -> str:
    """The kind of what a call of ``fn`` returns: ``kind_of(fn)``, except for a callable object
    (an instance whose class defines ``__call__``, also under ``functools.partial``), which
    ``inspect`` reports as a plain function whatever its ``__call__`` is: then the kind of that
    ``__call__`` (an ``async def __call__`` returns a coroutine)."""
    kind = kind_of(fn)
    if kind != FUNCTION:
        return kind
    target = fn
    while isinstance(target, functools.partial):
        target = target.func
    if isinstance(target, (classmethod, staticmethod)):
        target = target.__func__
    if (inspect.isfunction(target) or inspect.ismethod(target) or inspect.isbuiltin(target)
            or inspect.isclass(target) or not callable(target)):
        return FUNCTION
    return kind_of(getattr(type(target), "__call__", None))


def as_declared(wrapper: Callable, original: Any) -> Callable:
    """``wrapper`` (built for ``call_kind(original)``) as ``inspect`` sees ``original``: when
    ``inspect`` reports ``original`` as a plain function although its calls return a coroutine or
    a generator (a callable object), a plain ``def`` returning ``wrapper``'s call (so
    ``inspect.iscoroutinefunction`` & co. answer as for the original, and the awaited or
    iterated result is still ``wrapper``'s); else ``wrapper`` itself."""
    if kind_of(original) != FUNCTION or kind_of(wrapper) == FUNCTION:
        return wrapper

    def plain(*args: Any, **kwargs: Any) -> Any:
        return wrapper(*args, **kwargs)

    return functools.update_wrapper(plain, wrapper)


def kind_mismatch(kind: str, replacement: Any) -> str:
    """Why ``replacement`` cannot stand for a function of ``kind``, or "" when it can: its calls
    return the same kind (``call_kind``), or it is a plain function (which then returns what a
    call of ``kind`` returns: an awaitable, an iterable, an async iterable)."""
    own = call_kind(replacement)
    if own in (kind, FUNCTION):
        return ""
    return (f"the replacement is a {own} but the original is a {kind}: callers would get "
            f"{_RESULT[own]} where they expect {_RESULT[kind]}")


_RESULT = {FUNCTION: "a result", COROUTINE: "a coroutine", GENERATOR: "a generator",
           ASYNC_GENERATOR: "an async generator"}


def copy_identity(wrapper: Callable, source: Any, wrapped: Any) -> Callable:
    """Give ``wrapper`` the ``__module__``, ``__name__``, ``__qualname__`` and ``__doc__`` of
    ``source`` and ``__wrapped__ = wrapped`` (``inspect.signature`` follows it). Returns it."""
    for name in ("__module__", "__name__", "__qualname__", "__doc__"):
        try:
            setattr(wrapper, name, getattr(source, name))
        except (AttributeError, TypeError):
            pass
    wrapper.__wrapped__ = wrapped
    return wrapper


class FallBack(Exception):
    """Raised by a step's ``__exit__`` (before the first item) to restart the iteration on
    ``start()`` with ``step``."""

    def __init__(self, start: Callable[[], Any], step: Callable[[BaseException | None], Any]):
        super().__init__("restart the iteration on the fallback")
        self.start, self.step = start, step


class PlainStep:
    """A step that does nothing (``with step(thrown):`` runs the resume as is)."""

    __slots__ = ()

    def __call__(self, thrown: BaseException | None) -> "PlainStep":
        return self

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> bool:
        return False


PLAIN = PlainStep()

#: ``prepare(args, kwargs) -> (start, step)``: run at the generator's first step; ``start()``
#: makes the iterable (the call), ``step(thrown)`` the context manager of each resume
Prepare = Callable[[tuple, dict], "tuple[Callable[[], Any], Callable[[BaseException | None], Any]]"]


def delegate(start: Callable[[], Any], step: Callable[[BaseException | None], Any]):
    """Generator: ``yield from iter(start())`` (PEP 380: items, ``send``, ``throw``, ``close``
    and the return value pass through), with ``start`` plus the first item, and every later
    resume, run inside ``with step(thrown):`` (``thrown``: the exception being thrown into the
    iterator, else None). A ``FallBack`` raised by a step restarts on its ``start``/``step``."""
    it = None
    sent = thrown = None
    while True:
        try:
            with step(thrown):
                if it is None:
                    it = iter(start())
                    item = next(it)
                elif thrown is not None:
                    item = it.throw(thrown)
                elif sent is None:
                    item = next(it)
                else:
                    item = it.send(sent)
        except StopIteration as stop:
            return stop.value
        except FallBack as fallback:
            start, step, it, sent, thrown = fallback.start, fallback.step, None, None, None
            continue
        sent = thrown = None
        try:
            sent = yield item
        except GeneratorExit:
            close = getattr(it, "close", None)
            if close is not None:
                with step(None):
                    close()
            raise
        except BaseException as exc:
            if getattr(it, "throw", None) is None:
                raise
            thrown = exc


def generator_wrapper(prepare: Prepare) -> Callable:
    """A generator function whose calls ``delegate`` to what ``prepare(args, kwargs)`` chose
    (``prepare`` runs at the first step, as a generator's own code would)."""

    def wrapper(*args: Any, **kwargs: Any):
        start, step = prepare(args, kwargs)
        return (yield from delegate(start, step))

    return wrapper


def iterating_wrapper(kind: str, prepare: Prepare) -> Callable:
    """``generator_wrapper(prepare)`` for ``GENERATOR``, ``async_generator_wrapper(prepare)`` for
    ``ASYNC_GENERATOR``."""
    return (generator_wrapper if kind == GENERATOR else async_generator_wrapper)(prepare)


def async_generator_wrapper(prepare: Prepare) -> Callable:
    """An async generator function whose calls delegate to the async iterator of what
    ``prepare(args, kwargs)`` chose, as ``delegate`` does for generators (``asend``, ``athrow``,
    ``aclose`` pass through; async generators have no return value)."""

    async def wrapper(*args: Any, **kwargs: Any):
        start, step = prepare(args, kwargs)
        it = None
        sent = thrown = None
        while True:
            try:
                with step(thrown):
                    if it is None:
                        it = aiter(start())
                        item = await anext(it)
                    elif thrown is not None:
                        item = await it.athrow(thrown)
                    elif sent is None:
                        item = await anext(it)
                    else:
                        item = await it.asend(sent)
            except StopAsyncIteration:
                return
            except FallBack as fallback:
                start, step, it, sent, thrown = fallback.start, fallback.step, None, None, None
                continue
            sent = thrown = None
            try:
                sent = yield item
            except GeneratorExit:
                aclose = getattr(it, "aclose", None)
                if aclose is not None:
                    with step(None):
                        await aclose()
                raise
            except BaseException as exc:
                if getattr(it, "athrow", None) is None:
                    raise
                thrown = exc

    return wrapper
