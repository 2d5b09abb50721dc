"""Patch wrappers keep the kind of what they wrap: ``ctx.patch(..., guard=True)`` and a live
feature's bypass around a function, a coroutine function, a generator function and an async
generator function, as a method, a staticmethod and a classmethod; and a live feature's patches
see one state per call while other threads switch it."""
import asyncio
import functools
import inspect
import sys
import textwrap
import threading
import time
import uuid

import pytest
from structlog.testing import capture_logs

TARGET = '''
CALLS = []


class Engine:
    def plain(self, x):
        """The engine's plain."""
        CALLS.append("plain")
        if x == "boom":
            raise KeyError("engine")
        return ["orig", x]

    async def coro(self, x):
        """The engine's coro."""
        CALLS.append("coro")
        if x == "boom":
            raise KeyError("engine")
        return ["orig", x]

    def gen(self, x):
        """The engine's gen."""
        CALLS.append("gen")
        yield "orig"
        if x == "boom":
            raise KeyError("engine")
        yield x
        return "done"

    async def agen(self, x):
        """The engine's agen."""
        CALLS.append("agen")
        yield "orig"
        if x == "boom":
            raise KeyError("engine")
        yield x

    @staticmethod
    async def s_coro(x):
        CALLS.append("s_coro")
        if x == "boom":
            raise KeyError("engine")
        return ["orig", x]

    @classmethod
    def c_gen(cls, x):
        CALLS.append("c_gen")
        yield "orig"
        if x == "boom":
            raise KeyError("engine")
        yield x
        return "done"

    @staticmethod
    def s_plain(x):
        CALLS.append("s_plain")
        if x == "boom":
            raise KeyError("engine")
        return ["orig", x]

    @classmethod
    async def c_agen(cls, x):
        CALLS.append("c_agen")
        yield "orig"
        if x == "boom":
            raise KeyError("engine")
        yield x
'''

#: attribute -> kind of the replacement the feature writes
KINDS = {"plain": "def", "coro": "async", "gen": "gen", "agen": "agen",
         "s_coro": "async", "c_gen": "gen", "s_plain": "def", "c_agen": "agen"}

#: (kind, behaviour) -> body of the replacement ``r(*args, **kwargs)`` over ``original``
REPLACEMENTS = {
    ("def", "works"): "return ['new'] + original(*args, **kwargs)[1:]",
    ("def", "fails"): "raise ValueError('feature bug')",
    ("def", "passes"): "return original(*args, **kwargs)",
    ("async", "works"): "return ['new'] + (await original(*args, **kwargs))[1:]",
    ("async", "fails"): "await asyncio.sleep(0)\n        raise ValueError('feature bug')",
    ("async", "passes"): "return await original(*args, **kwargs)",
    ("gen", "works"): "yield 'new'\n        it = original(*args, **kwargs)\n        next(it)\n"
                      "        return (yield from it)",
    ("gen", "fails"): "raise ValueError('feature bug')\n        yield",
    ("gen", "midway"): "yield 'new'\n        raise ValueError('feature bug')",
    ("gen", "passes"): "return (yield from original(*args, **kwargs))",
    ("agen", "works"): "yield 'new'\n        it = original(*args, **kwargs)\n        await anext(it)\n"
                       "        async for item in it:\n            yield item",
    ("agen", "fails"): "raise ValueError('feature bug')\n        yield",
    ("agen", "midway"): "yield 'new'\n        raise ValueError('feature bug')",
    ("agen", "passes"): "async for item in original(*args, **kwargs):\n            yield item",
}
PREFIX = {"def": "def", "async": "async def", "gen": "def", "agen": "async def"}


def feature_source(target: str, behaviour: str, *, guard: bool, live: bool) -> str:
    makes = []
    for attr, kind in KINDS.items():
        body = REPLACEMENTS.get((kind, behaviour), REPLACEMENTS[(kind, "works")])
        makes.append(textwrap.dedent(f"""
            def make_{attr}(original):
                @functools.wraps(original)
                {PREFIX[kind]} r(*args, **kwargs):
                    {{body}}
                return r
            ctx.patch(module.Engine, {attr!r}, make_{attr}, guard={guard})
        """).replace("{body}", body).replace("\n", "\n    "))
    return ("import asyncio\nimport functools\nfrom dsv41_flags import Feature\n\n"
            "def install(module, ctx):" + "".join(makes) + "\n\n"
            f"FEATURE = Feature(name='kinds', target={target!r}, install=install, summary='kinds',"
            f" engine='', live={live})\n")


def run(fn, *args):
    """Call ``fn`` and drive what it returns: ``(result, items)`` (items of a generator)."""
    out = fn(*args)
    if inspect.iscoroutine(out):
        return asyncio.run(out), None
    if inspect.isasyncgen(out):
        async def collect():
            return [item async for item in out]
        return None, asyncio.run(collect())
    if inspect.isgenerator(out):
        items = []
        try:
            while True:
                items.append(next(out))
        except StopIteration as stop:
            return stop.value, items
    return out, None


def expected(attr: str, head: str, x: str = "x"):
    kind = KINDS[attr]
    if kind in ("gen", "agen"):
        return ("done" if kind == "gen" else None), [head, x]
    return [head, x], None


@pytest.fixture
def engine(tmp_path, monkeypatch, make_runtime):
    """``engine(behaviour, guard=, live=, on=) -> (module, runtime)``: the target imported with
    the feature installed."""
    made = []

    def _make(behaviour: str, *, guard: bool, live: bool, on: bool = True):
        name = f"kinds_target_{uuid.uuid4().hex[:8]}"
        (tmp_path / f"{name}.py").write_text(TARGET)
        monkeypatch.syspath_prepend(str(tmp_path))
        feats = tmp_path / f"feats_{name}"
        feats.mkdir()
        (feats / "kinds.py").write_text(feature_source(name, behaviour, guard=guard, live=live))
        rt = make_runtime(f"[default]\nstrict = true\nkinds = {str(on).lower()}\n", features_dir=feats)
        rt.arm()
        module = __import__(name)
        made.append(name)
        st = {s.name: s for s in rt.states()}["kinds"]
        assert st.state == ("installed" if on else "bypassed"), st
        return module, rt

    yield _make
    for name in made:
        sys.modules.pop(name, None)


def _unpatched(tmp_path):
    namespace: dict = {}
    exec(TARGET, namespace)
    return namespace["Engine"]


KIND_CHECKS = (inspect.iscoroutinefunction, inspect.isgeneratorfunction, inspect.isasyncgenfunction)


@pytest.mark.parametrize("guard,live,on", [(True, False, True), (False, True, True), (False, True, False),
                                           (True, True, True), (True, True, False)],
                         ids=["guarded", "live-on", "live-bypassed", "guarded-live-on", "guarded-live-bypassed"])
@pytest.mark.parametrize("attr", list(KINDS))
def test_a_wrapper_keeps_the_kind_signature_and_identity_of_what_it_wraps(engine, tmp_path, attr, guard, live, on):
    module, rt = engine("works", guard=guard, live=live, on=on)
    plain = _unpatched(tmp_path)
    for patched, original in ((getattr(module.Engine, attr), getattr(plain, attr)),
                              (getattr(module.Engine(), attr), getattr(plain(), attr))):
        assert [check(patched) for check in KIND_CHECKS] == [check(original) for check in KIND_CHECKS]
        assert inspect.signature(patched) == inspect.signature(original)
        for field in ("__name__", "__qualname__", "__doc__"):
            assert getattr(patched, field) == getattr(original, field)
        assert patched.__module__ == module.__name__
    raw = module.Engine.__dict__[attr]
    assert type(raw) is type(plain.__dict__[attr])                  # staticmethod / classmethod kept
    record = next(r for r in rt.ledger.records("kinds") if r.attr == attr)
    below = record.original
    fn = raw.__func__ if isinstance(raw, (staticmethod, classmethod)) else raw
    assert fn.__wrapped__ is (below.__func__ if isinstance(below, (staticmethod, classmethod)) else below)
    assert run(getattr(module.Engine(), attr), "x") == expected(attr, "new" if on else "orig")
    if isinstance(raw, (staticmethod, classmethod)):                 # called on the class too
        assert run(getattr(module.Engine, attr), "x") == expected(attr, "new" if on else "orig")


@pytest.mark.parametrize("live", [False, True], ids=["guarded", "guarded-live"])
@pytest.mark.parametrize("attr", list(KINDS))
def test_a_guarded_patch_whose_code_fails_falls_back_to_the_original_in_every_kind(engine, attr, live):
    module, rt = engine("fails", guard=True, live=live)
    module.CALLS.clear()
    with capture_logs() as logs:
        assert run(getattr(module.Engine(), attr), "x") == expected(attr, "orig")
    assert module.CALLS == [attr]
    errors = [e for e in logs if e["event"] == "kinds.error"]
    assert len(errors) == 1 and errors[0]["cause"] == "ValueError: feature bug"
    assert errors[0]["action"] == "called the engine's original, as without this feature"
    assert errors[0]["step"] == attr


@pytest.mark.parametrize("attr", list(KINDS))
def test_what_the_engine_raises_under_a_guarded_patch_reaches_the_caller_unchanged(engine, attr):
    module, rt = engine("passes", guard=True, live=True)
    module.CALLS.clear()
    with capture_logs() as logs:
        with pytest.raises(KeyError, match="engine"):
            run(getattr(module.Engine(), attr), "boom")
    assert module.CALLS == [attr]                                    # the original ran once
    assert not [e for e in logs if e["event"] == "kinds.error"]


@pytest.mark.parametrize("attr", [a for a, k in KINDS.items() if k in ("gen", "agen")])
def test_a_guarded_generator_that_fails_midway_reports_and_raises(engine, attr):
    module, rt = engine("midway", guard=True, live=False)
    module.CALLS.clear()
    it = getattr(module.Engine(), attr)("x")
    with capture_logs() as logs:
        if KINDS[attr] == "gen":
            assert next(it) == "new"
            with pytest.raises(ValueError, match="feature bug"):
                next(it)
        else:
            async def two():
                assert await anext(it) == "new"
                with pytest.raises(ValueError, match="feature bug"):
                    await anext(it)
            asyncio.run(two())
    assert module.CALLS == []                                        # the original never ran
    errors = [e for e in logs if e["event"] == "kinds.error"]
    assert len(errors) == 1 and errors[0]["action"].startswith("raised to the caller after 1 item(s)")


def test_a_guarded_generator_passes_send_throw_and_close_through(engine):
    module, rt = engine("passes", guard=True, live=True)

    def echo():
        got = yield "ready"
        while True:
            try:
                got = yield f"got {got}"
            except LookupError as exc:
                got = f"caught {exc}"

    guarded = rt_ctx_guard(rt, echo)
    assert inspect.isgeneratorfunction(guarded)
    it = guarded()
    assert next(it) == "ready" and it.send(1) == "got 1"
    assert it.throw(LookupError("x")) == "got caught x"
    it.close()
    with pytest.raises(StopIteration):
        next(it)
    it = guarded()
    next(it)
    with pytest.raises(TypeError):                                   # thrown in, not caught: the caller's
        it.throw(TypeError("yours"))


def rt_ctx_guard(rt, fn):
    from dsv41_flags.patch import InstallContext

    ctx = InstallContext(rt.features["kinds"], {}, None, rt.log, rt.ledger, report=rt.log)
    return ctx.guard(fn, fn)


@pytest.mark.parametrize("kind,replacement", [("coroutine function", "async def r(*a): return 1"),
                                              ("generator function", "def r(*a):\n    yield 1")],
                         ids=["async-for-plain", "generator-for-plain"])
def test_a_replacement_of_another_kind_than_the_original_fails_the_install(tmp_path, monkeypatch, make_runtime, kind, replacement):
    name = f"kinds_mismatch_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text("def f(x):\n    return x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    feats = tmp_path / "feats"
    feats.mkdir()
    (feats / "kinds.py").write_text(
        "from dsv41_flags import Feature\n" + replacement + "\n"
        "def install(module, ctx):\n    ctx.patch(module, 'f', lambda original: r, guard=True)\n"
        f"FEATURE = Feature(name='kinds', target={name!r}, install=install, summary='k', engine='', live=True)\n")
    rt = make_runtime("[default]\nstrict = false\nkinds = true\n", features_dir=feats)
    rt.arm()
    module = __import__(name)
    sys.modules.pop(name, None)
    st = {s.name: s for s in rt.states()}["kinds"]
    assert st.state == "failed" and f"the replacement is a {kind} but the original is a function" in st.detail
    assert module.f(3) == 3


# ------------------------------------------------------------------ one state per call
PAIR_TARGET = '''
import asyncio
import functools


class Pair:
    def a(self, hook=None):
        if hook:
            hook()
        return ("a-orig", self.b())

    def b(self):
        return "b-orig"

    async def ca(self, hook=None):
        if hook:
            hook()
        await asyncio.sleep(0)
        return ("a-orig", await self.cb())

    async def cb(self):
        return "b-orig"

    def ga(self, hook=None):
        yield "a-orig"
        if hook:
            hook()
        yield self.b()
'''

PAIR_FEATURE = '''
from dsv41_flags import Feature


def install(module, ctx):
    ctx.patch(module.Pair, "a", lambda original: lambda self, hook=None: (
        (hook() if hook else None), ("a-new", self.b()))[1])
    ctx.patch(module.Pair, "b", lambda original: lambda self: "b-new")

    def make_ca(original):
        async def ca(self, hook=None):
            if hook:
                hook()
            return ("a-new", await self.cb())
        return ca
    ctx.patch(module.Pair, "ca", make_ca)

    def make_cb(original):
        async def cb(self):
            return "b-new"
        return cb
    ctx.patch(module.Pair, "cb", make_cb)

    def make_ga(original):
        def ga(self, hook=None):
            yield "a-new"
            if hook:
                hook()
            yield self.b()
        return ga
    ctx.patch(module.Pair, "ga", make_ga)


FEATURE = Feature(name="pair", target=TARGET, install=install, summary="two patches", engine="",
                  live=True)
'''


@pytest.fixture
def pair(tmp_path, monkeypatch, make_runtime):
    name = f"pair_target_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(PAIR_TARGET)
    monkeypatch.syspath_prepend(str(tmp_path))
    feats = tmp_path / "feats"
    feats.mkdir()
    (feats / "pair.py").write_text(PAIR_FEATURE.replace("TARGET", repr(name)))
    rt = make_runtime("[default]\npair = false\n", features_dir=feats)
    rt.arm()
    module = __import__(name)
    yield module, rt
    sys.modules.pop(name, None)


CONSISTENT = {(("a-new", "b-new")), ("a-orig", "b-orig")}


@pytest.mark.parametrize("start_on", [False, True])
@pytest.mark.parametrize("attr", ["a", "ca", "ga"])
def test_a_call_in_flight_across_a_switch_finishes_in_the_state_it_started_with(pair, attr, start_on):
    module, rt = pair
    rt.switch("pair", start_on, requested_by="t")
    flip = lambda: rt.switch("pair", not start_on, requested_by="mid-call")   # noqa: E731
    out = getattr(module.Pair(), attr)(flip)
    if inspect.iscoroutine(out):
        out = asyncio.run(out)
    out = tuple(out)
    assert out == (("a-new", "b-new") if start_on else ("a-orig", "b-orig"))
    assert rt.value(rt.features["pair"]) is (not start_on)
    after = run(getattr(module.Pair(), attr))[0] if attr == "ca" else tuple(getattr(module.Pair(), attr)())
    assert after == (("a-new", "b-new") if not start_on else ("a-orig", "b-orig"))


def test_threads_calling_while_others_switch_never_see_a_half_switched_feature(pair):
    """4 threads call A (which calls B) while 2 threads switch 150 times each (bounded: 60 s)."""
    module, rt = pair
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # threads interleave often: switches land mid-call
    deadline = time.monotonic() + 60
    switching = [2]
    mixed: list = []
    calls = [0]
    errors: list = []

    def caller():
        obj = module.Pair()
        try:
            while switching[0] and time.monotonic() < deadline:
                got = obj.a()
                calls[0] += 1
                if got not in CONSISTENT:
                    mixed.append(got)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    def switcher(k):
        obj = module.Pair()
        try:
            for i in range(150):
                rt.switch("pair", (i + k) % 2 == 0, requested_by=f"s{k}")
                got = obj.a()
                if got not in CONSISTENT:
                    mixed.append(got)
                time.sleep(0)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            switching[0] -= 1

    threads = ([threading.Thread(target=caller) for _ in range(4)]
               + [threading.Thread(target=switcher, args=(k,)) for k in range(2)])
    with capture_logs():
        for t in threads:
            t.start()
        try:
            for t in threads:
                t.join(timeout=max(1.0, deadline - time.monotonic()))
        finally:
            sys.setswitchinterval(interval)
    assert not errors and not any(t.is_alive() for t in threads)
    assert calls[0] > 0 and rt.live.generation > 10
    assert mixed == []


def test_a_call_that_starts_after_a_switch_sees_the_new_state_in_every_patch(pair):
    module, rt = pair
    obj = module.Pair()
    for value in (True, False, True):
        rt.switch("pair", value, requested_by="t")
        expect = ("a-new", "b-new") if value else ("a-orig", "b-orig")
        assert obj.a() == expect and asyncio.run(obj.ca()) == expect and tuple(obj.ga()) == expect


# -- inherited descriptors: the subclass's attribute keeps the kind of the base's ---------------

def _hierarchy():
    """A base, a subclass defining nothing, a grandchild defining its own ``m`` (over super)."""

    class A:
        @classmethod
        def c(cls, x):
            return [cls.__name__, x]

        @staticmethod
        def s(x):
            return ["s", x]

        @property
        def p(self):
            return ["p"]

        def m(self, x):
            return [type(self).__name__, x]

    class B(A):
        pass

    class C(B):
        def m(self, x):
            return ["C own"] + super().m(x)

    return {"A": A, "B": B, "C": C}


@pytest.mark.parametrize("attr,call,before,after", [
    ("c", lambda k: k.c("x"), ["B", "x"], ["new", "B", "x"]),
    ("s", lambda k: k.s("x"), ["s", "x"], ["new", "s", "x"]),
    ("m", lambda k: k().m("x"), ["B", "x"], ["new", "B", "x"]),
], ids=["classmethod", "staticmethod", "method"])
def test_patching_an_inherited_attribute_on_a_subclass_keeps_its_kind_and_uninstall_leaves_nothing(attr, call, before, after):
    from dsv41_flags.patch import Ledger
    classes = _hierarchy()
    Base, Sub = classes["A"], classes["B"]
    ledger = Ledger()

    def make(original):
        def replacement(*args, **kwargs):
            return ["new"] + original(*args, **kwargs)
        return replacement

    ledger.patch("inherit", Sub, attr, make)
    assert type(vars(Sub)[attr]) is type(vars(Base)[attr])
    assert call(Sub) == after
    assert vars(Base)[attr] is not vars(Sub)[attr] and call(Base) != after   # the base is untouched
    instance_call = {"c": lambda: Sub().c("x"), "s": lambda: Sub().s("x"), "m": lambda: Sub().m("x")}[attr]
    assert instance_call() == after
    ledger.uninstall("inherit")
    assert attr not in vars(Sub)
    assert call(Sub) == before


def test_patching_an_inherited_property_on_a_subclass_keeps_a_property():
    from dsv41_flags.patch import Ledger
    classes = _hierarchy()
    Base, Sub = classes["A"], classes["B"]
    ledger = Ledger()
    ledger.patch("inherit", Sub, "p", lambda original: property(lambda self: ["new"] + original.fget(self)))
    assert isinstance(vars(Sub)["p"], property) and Sub().p == ["new", "p"] and Base().p == ["p"]
    ledger.uninstall("inherit")
    assert "p" not in vars(Sub) and Sub().p == ["p"]


@pytest.mark.parametrize("guard,live", [(True, False), (False, True), (True, True)],
                         ids=["guarded", "live", "guarded-live"])
def test_a_feature_patching_an_inherited_classmethod_keeps_it_a_classmethod(guard, live):
    from dsv41_flags.live import Gate
    from dsv41_flags.patch import InstallContext, Ledger
    classes = _hierarchy()
    Base, Sub = classes["A"], classes["B"]

    class Declared:
        name = "inherit"

    ctx = InstallContext(Declared(), {}, None, _Log(), Ledger(), gate=Gate("inherit", True) if live else None)
    ctx.patch(Sub, "c", lambda original: (lambda cls, x: ["new"] + original(cls, x)), guard=guard)
    assert isinstance(vars(Sub)["c"], classmethod)
    assert Sub.c("x") == ["new", "B", "x"] and Base.c("x") == ["A", "x"]
    ctx.ledger.uninstall("inherit")
    assert "c" not in vars(Sub) and Sub.c("x") == ["B", "x"]


# -- callable objects: the wrapper keeps what inspect says and guards what the call returns -----

class _Log:
    def __init__(self):
        self.events = []

    def error(self, event, **fields):
        self.events.append((event, fields))

    info = warning = debug = error


class _AsyncCall:
    def __init__(self, fail=False):
        self.fail = fail

    async def __call__(self, x):
        await asyncio.sleep(0)
        if self.fail:
            raise ValueError("feature bug")
        return ["orig", x]


class _GenCall:
    def __init__(self, fail=False):
        self.fail = fail

    def __call__(self, x):
        if self.fail:
            raise ValueError("feature bug")
        yield "orig"
        yield x


class _AsyncGenCall:
    def __init__(self, fail=False):
        self.fail = fail

    async def __call__(self, x):
        if self.fail:
            raise ValueError("feature bug")
        yield "orig"
        yield x


async def _async_fn(prefix, x):
    await asyncio.sleep(0)
    if prefix == "boom":
        raise ValueError("feature bug")
    return [prefix, x]


def _partial_async(fail=False):
    import functools
    return functools.partial(_async_fn, "boom" if fail else "orig")


CALLABLE_OBJECTS = {"async __call__": (_AsyncCall, (["orig", "x"], None)),
                    "generator __call__": (_GenCall, (None, ["orig", "x"])),
                    "async generator __call__": (_AsyncGenCall, (None, ["orig", "x"])),
                    "partial of async def": (_partial_async, (["orig", "x"], None))}


@pytest.mark.parametrize("name", list(CALLABLE_OBJECTS))
def test_a_guard_around_a_callable_object_keeps_its_kind_and_falls_back_when_awaited_or_iterated(name):
    from dsv41_flags.patch import InstallContext, Ledger
    make, result = CALLABLE_OBJECTS[name]
    log = _Log()

    class Declared:
        name = "callables"

    ctx = InstallContext(Declared(), {}, None, log, Ledger())
    original = make()
    guarded = ctx.guard(make(fail=True), original, step="call")
    assert [check(guarded) for check in KIND_CHECKS] == [check(original) for check in KIND_CHECKS]
    assert log.events == []                                      # nothing ran at the call yet
    assert run(guarded, "x") == result                           # the original's result
    assert [e for e, _ in log.events] == ["callables.error"]
    assert log.events[0][1]["cause"] == "ValueError: feature bug"


@pytest.mark.parametrize("name", list(CALLABLE_OBJECTS))
@pytest.mark.parametrize("on", [True, False], ids=["on", "bypassed"])
def test_a_live_bypass_around_a_callable_object_keeps_its_kind(name, on):
    from dsv41_flags.live import Gate, gated
    make, result = CALLABLE_OBJECTS[name]
    original = make()
    bypass = gated(lambda o: o, Gate("callables", on))(original)
    assert [check(bypass) for check in KIND_CHECKS] == [check(original) for check in KIND_CHECKS]
    assert run(bypass, "x") == result


def test_a_replacement_whose_calls_return_a_coroutine_cannot_stand_for_a_plain_function():
    from dsv41_flags.wrappers import COROUTINE, FUNCTION, call_kind, kind_mismatch
    assert call_kind(_AsyncCall()) == COROUTINE
    assert "coroutine" in kind_mismatch(FUNCTION, _AsyncCall())
    assert kind_mismatch(COROUTINE, _AsyncCall()) == ""


# -- a class hierarchy: whether an owner had its own attribute is read from its own __dict__ ------

def _tagging(feature, attr):
    """``make`` of ``feature`` for ``attr``: the same kind, its result tagged with the feature."""
    if attr == "p":
        return lambda original: property(lambda self: [feature] + original.fget(self))

    def make(original):
        def replacement(*args, **kwargs):
            return [feature] + original(*args, **kwargs)
        return replacement

    return make


_READ = {"c": lambda k: k.c("x"), "s": lambda k: k.s("x"), "m": lambda k: k().m("x"), "p": lambda k: k().p}

# (feature, class) patches in order; the features uninstalled first, with those kept in place
ORDERS = {
    "base-then-subclass": ([("f", "A"), ("f", "B")], ["f"], set()),
    "subclass-then-base": ([("f", "B"), ("f", "A")], ["f"], set()),
    "grandchild-base-subclass": ([("f", "C"), ("f", "A"), ("f", "B")], ["f"], set()),
    "same-attribute-patched-twice": ([("f", "A"), ("f", "B"), ("f", "A"), ("f", "B")], ["f"], set()),
    "two-features": ([("f", "A"), ("g", "B"), ("g", "A")], ["g", "f"], set()),
    "uninstall-the-subclass-feature-only": ([("f", "A"), ("g", "B")], ["g"], set()),
    # g's patch on B calls through to what A holds at call time: f's uninstall restores A and g
    # follows it (nothing is kept in place)
    "uninstall-the-base-feature-only": ([("f", "A"), ("g", "B")], ["f"], set()),
    "uninstall-the-base-feature-only-subclass-first": ([("g", "B"), ("f", "A")], ["f"], set()),
}


def _same_dict(klass, before):
    return vars(klass).keys() == before.keys() and all(vars(klass)[k] is v for k, v in before.items())


def _rebuilt(stock, attr):
    """A new ``attr`` of the stock's kind, tagged "new"."""
    if attr in ("c", "s"):
        return type(stock)(_tagging("new", attr)(stock.__func__))
    return _tagging("new", attr)(stock)


@pytest.mark.parametrize("attr", ["m", "c", "s", "p"], ids=["method", "classmethod", "staticmethod", "property"])
@pytest.mark.parametrize("order", list(ORDERS))
def test_uninstall_on_a_class_hierarchy_leaves_every_class_dict_as_before_in_any_order(attr, order):
    from dsv41_flags.patch import Ledger
    classes = _hierarchy()
    before = {name: dict(vars(k)) for name, k in classes.items()}
    stock = {name: _READ[attr](k) for name, k in classes.items()}
    steps, uninstalled, blocked = ORDERS[order]
    ledger = Ledger()
    for feature, name in steps:
        ledger.patch(feature, classes[name], attr, _tagging(feature, attr))
    for feature, name in steps:
        assert feature in _READ[attr](classes[name])          # the patch is on
        assert type(vars(classes[name])[attr]) is type(before["A"][attr])
    for feature in uninstalled:
        assert {r.feature for r in ledger.uninstall(feature)} == blocked & {feature}
    left = {f for f, _ in steps} - (set(uninstalled) - blocked)
    for name, klass in classes.items():
        patched_here = [f for f, n in steps if n == name and f in left]
        if patched_here:
            assert _READ[attr](klass)[0] == patched_here[-1]
        else:
            assert _same_dict(klass, before[name])
    for feature in sorted(left, reverse=True):                 # g (above) first, then f
        assert ledger.uninstall(feature) == []
    assert all(_same_dict(klass, before[name]) for name, klass in classes.items())
    assert ledger.records() == []
    assert {name: _READ[attr](k) for name, k in classes.items()} == stock
    setattr(classes["A"], attr, _rebuilt(before["A"][attr], attr))
    assert _READ[attr](classes["B"])[0] == "new"               # the subclass follows its base again


@pytest.mark.parametrize("guard,live", [(False, False), (True, False), (False, True), (True, True)],
                         ids=["plain", "guarded", "live", "guarded-live"])
@pytest.mark.parametrize("attr", ["m", "c", "s"], ids=["method", "classmethod", "staticmethod"])
def test_a_feature_patching_a_base_then_its_subclass_uninstalls_to_inheritance(attr, guard, live):
    from dsv41_flags.live import Gate
    from dsv41_flags.patch import InstallContext, Ledger
    classes = _hierarchy()
    A, B = classes["A"], classes["B"]
    before_a, before_b = dict(vars(A)), dict(vars(B))

    class Declared:
        name = "inherit"

    ctx = InstallContext(Declared(), {}, None, _Log(), Ledger(), gate=Gate("inherit", True) if live else None)
    ctx.patch(A, attr, _tagging("inherit", attr), guard=guard)
    ctx.patch(B, attr, _tagging("inherit", attr), guard=guard)
    assert _READ[attr](B)[0] == "inherit" and attr in vars(B)
    ctx.ledger.uninstall("inherit")
    assert vars(B).keys() == before_b.keys() and attr not in vars(B)
    assert all(vars(A)[k] is v for k, v in before_a.items())
    A.m = lambda self, x: ["new A.m"]
    assert B().m(1) == ["new A.m"]                             # B follows A again


def test_a_second_ledger_patching_a_subclass_does_not_adopt_the_base_patch_of_the_first():
    from dsv41_flags.patch import Ledger
    classes = _hierarchy()
    A, B = classes["A"], classes["B"]
    first, second = Ledger(), Ledger()
    first.patch("f", A, "m", _tagging("f", "m"))
    second.patch("f", B, "m", _tagging("f", "m"))
    record, = second.records()
    assert record.had_own is False and record.original is vars(A)["m"]
    second.uninstall("f")
    assert "m" not in vars(B) and B().m(1) == ["f", "B", 1]    # B inherits A's patch again
    first.uninstall("f")
    assert B().m(1) == ["B", 1]


def test_an_instance_patched_after_its_class_uninstalls_to_its_class():
    from dsv41_flags.patch import Ledger
    A = _hierarchy()["A"]
    a = A()
    ledger = Ledger()
    ledger.patch("f", A, "m", _tagging("f", "m"))
    ledger.patch("f", a, "m", _tagging("f", "m"))
    assert a.m(1) == ["f", "f", "A", 1]
    ledger.uninstall("f")
    assert vars(a) == {} and a.m(1) == ["A", 1]


# -- every stored kind with guard=False, guard=True and live: kept, or a clear install failure ------

class _Kinds:
    VALUE = 3

    def meth(self):
        return "meth"

    @classmethod
    def cm(cls):
        return "cm"

    @staticmethod
    def sm():
        return "sm"

    @property
    def prop(self):
        return "prop"

    @functools.cached_property
    def cached(self):
        return "cached"


def _fn(original):
    def replacement(*args):
        return "new"
    return replacement


_REPLACEMENTS = {
    "function": _fn,
    "property": lambda original: property(lambda self: "new"),
    "staticmethod": lambda original: staticmethod(lambda: "new"),
    "cached_property": lambda original: functools.cached_property(lambda self: "new"),
    "value": lambda original: 5,
}
_MODES = {"plain": (False, False), "guarded": (True, False), "live": (False, True), "guarded-live": (True, True)}
# (attribute, replacement) -> what every mode gives: "new" read back, or the error (plain/guarded, live)
KEPT, REFUSED = "kept", "refused"
STORED_KINDS = {
    ("meth", "function"): {m: KEPT for m in _MODES},
    ("meth", "property"): {m: REFUSED for m in _MODES},
    ("cm", "function"): {m: KEPT for m in _MODES},
    ("cm", "staticmethod"): {m: REFUSED for m in _MODES},
    ("cm", "property"): {m: REFUSED for m in _MODES},
    ("sm", "function"): {m: KEPT for m in _MODES},
    ("prop", "property"): {"plain": KEPT, "guarded": KEPT, "live": REFUSED, "guarded-live": REFUSED},
    ("prop", "function"): {m: REFUSED for m in _MODES},
    ("cached", "cached_property"): {"plain": KEPT, "guarded": REFUSED, "live": REFUSED, "guarded-live": REFUSED},
    ("cached", "function"): {m: REFUSED for m in _MODES},
    ("VALUE", "value"): {"plain": KEPT, "guarded": REFUSED, "live": REFUSED, "guarded-live": REFUSED},
    ("VALUE", "function"): {m: REFUSED for m in _MODES},
}
_READ_KIND = {"meth": lambda k: k().meth(), "cm": lambda k: k.cm(), "sm": lambda k: k.sm(),
              "prop": lambda k: k().prop, "cached": lambda k: k().cached, "VALUE": lambda k: k.VALUE}


@pytest.mark.parametrize("mode", list(_MODES))
@pytest.mark.parametrize("attr,replacement", list(STORED_KINDS), ids=[f"{a}-by-{r}" for a, r in STORED_KINDS])
def test_a_patch_keeps_the_stored_kind_or_fails_naming_feature_and_attribute(attr, replacement, mode):
    from dsv41_flags.errors import SwitchError
    from dsv41_flags.live import Gate
    from dsv41_flags.patch import InstallContext, Ledger

    class K(_Kinds):
        pass

    for name in ("VALUE", "meth", "cm", "sm", "prop", "cached"):
        setattr(K, name, vars(_Kinds)[name])
    before = dict(vars(K))
    guard, live = _MODES[mode]

    class Declared:
        name = "kinds"

    ctx = InstallContext(Declared(), {}, None, _Log(), Ledger(), gate=Gate("kinds", True) if live else None)
    if STORED_KINDS[(attr, replacement)][mode] == KEPT:
        ctx.patch(K, attr, _REPLACEMENTS[replacement], guard=guard)
        assert type(vars(K)[attr]) is type(before[attr])
        assert _READ_KIND[attr](K) in ("new", 5)
        ctx.ledger.uninstall("kinds")
    else:
        with pytest.raises((SwitchError, TypeError)) as caught:
            ctx.patch(K, attr, _REPLACEMENTS[replacement], guard=guard)
        assert live or type(caught.value) is TypeError        # live: SwitchError, or the guard's TypeError
        assert "'kinds'" in str(caught.value) and f"K.{attr}" in str(caught.value)
        assert ctx.ledger.records() == []
    assert vars(K).keys() == before.keys() and all(vars(K)[k] is v for k, v in before.items())


def test_a_guarded_property_stays_a_property_whose_accessors_fall_back_to_the_originals():
    from dsv41_flags.patch import InstallContext, Ledger

    class Engine:
        def __init__(self):
            self.stored = 1

        @property
        def level(self):
            if self.stored == "engine":
                raise LookupError("engine says no")
            return self.stored

        @level.setter
        def level(self, value):
            self.stored = value

    class Declared:
        name = "prop_fix"

    def make(original):
        def get(self):
            if self.stored == 0:
                raise ValueError("feature bug")
            return ["new", original.fget(self)]

        def put(self, value):
            if value == "bad":
                raise ValueError("feature setter bug")
            original.fset(self, value * 10)
        return property(get, put)

    log = _Log()
    ctx = InstallContext(Declared(), {}, None, log, Ledger(), report=log)
    ctx.patch(Engine, "level", make, guard=True)
    assert isinstance(vars(Engine)["level"], property)
    engine = Engine()
    assert engine.level == ["new", 1]
    engine.level = 2
    assert engine.stored == 20
    engine.level = "bad"                                       # falls back to the original setter
    assert engine.stored == "bad"
    engine.stored = 0
    assert engine.level == 0                                   # falls back to the original getter
    engine.stored = "engine"
    with pytest.raises(LookupError, match="engine says no"):   # the engine's own error: unchanged
        engine.level
    assert [(e, f["step"]) for e, f in log.events] == [("prop_fix.error", "level.setter"),
                                                       ("prop_fix.error", "level.getter")]
    ctx.ledger.uninstall("prop_fix")
    assert Engine().level == 1


def test_a_guarded_patch_returning_a_method_for_a_property_fails_the_install(tmp_path, monkeypatch, make_runtime):
    name = f"kinds_property_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text("class A:\n    @property\n    def prop(self):\n        return 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    feats = tmp_path / "feats"
    feats.mkdir()
    (feats / "kinds.py").write_text(
        "from dsv41_flags import Feature\n"
        "def install(module, ctx):\n"
        "    ctx.patch(module.A, 'prop', lambda original: (lambda self: 1), guard=True)\n"
        f"FEATURE = Feature(name='kinds', target={name!r}, install=install, summary='k', engine='')\n")
    rt = make_runtime("[default]\nstrict = false\nkinds = true\n", features_dir=feats)
    rt.arm()
    module = __import__(name)
    sys.modules.pop(name, None)
    st = {s.name: s for s in rt.states()}["kinds"]
    assert st.state == "failed"
    assert "feature 'kinds': A.prop is a property but the replacement is a function" in st.detail
    assert isinstance(vars(module.A)["prop"], property) and module.A().prop == 42


# -- patches on a base and its subclass compose in either order -----------------------------------

@pytest.mark.parametrize("removed_first", ["base-feature", "subclass-feature"])
@pytest.mark.parametrize("first", ["base-first", "subclass-first"])
@pytest.mark.parametrize("attr", ["m", "c", "s", "p"], ids=["method", "classmethod", "staticmethod", "property"])
def test_patches_on_a_base_and_its_subclass_compose_in_either_order_and_uninstall_to_the_originals(attr, first, removed_first):
    from dsv41_flags.patch import Ledger
    classes = _hierarchy()
    A, B, C = classes["A"], classes["B"], classes["C"]
    before = {name: dict(vars(k)) for name, k in classes.items()}
    stock = {name: _READ[attr](k) for name, k in classes.items()}
    ledger = Ledger()
    steps = [("base", A), ("sub", B)] if first == "base-first" else [("sub", B), ("base", A)]
    for feature, klass in steps:
        ledger.patch(feature, klass, attr, _tagging(feature, attr))
    assert _READ[attr](B)[:2] == ["sub", "base"]          # the subclass's patch, then the base's
    assert _READ[attr](A)[0] == "base" and "sub" not in _READ[attr](A)
    assert _READ[attr](C)[:3 if attr == "m" else 2] == (["C own"] if attr == "m" else []) + ["sub", "base"]
    gone, stays = ("base", "sub") if removed_first == "base-feature" else ("sub", "base")
    assert ledger.uninstall(gone) == []                     # nothing captured the other: no block
    assert gone not in _READ[attr](B) and stays in _READ[attr](B)
    assert ledger.uninstall(stays) == []
    assert all(_same_dict(k, before[name]) for name, k in classes.items())
    assert {name: _READ[attr](k) for name, k in classes.items()} == stock


@pytest.mark.parametrize("guard,live", [(False, False), (True, False), (False, True), (True, True)],
                         ids=["plain", "guarded", "live", "guarded-live"])
@pytest.mark.parametrize("attr", ["m", "c", "s"], ids=["method", "classmethod", "staticmethod"])
def test_a_base_patched_by_one_feature_after_another_patched_its_subclass_reaches_the_subclass(attr, guard, live):
    from dsv41_flags.live import Gate
    from dsv41_flags.patch import InstallContext, Ledger
    classes = _hierarchy()
    A, B = classes["A"], classes["B"]
    ledger = Ledger()

    def context(name):
        class Declared:
            pass
        Declared.name = name
        return InstallContext(Declared(), {}, None, _Log(), ledger, gate=Gate(name, True) if live else None)

    context("sub").patch(B, attr, _tagging("sub", attr), guard=guard)
    context("base").patch(A, attr, _tagging("base", attr), guard=guard)
    assert _READ[attr](B)[:2] == ["sub", "base"] and type(vars(B)[attr]) is type(vars(A)[attr])
    ledger.uninstall("base")
    assert _READ[attr](B)[:2] == ["sub", "B" if attr in ("m", "c") else "s"]
    ledger.uninstall("sub")
    assert attr not in vars(B) and _READ[attr](B)[0] in ("B", "s")


def test_an_inherited_coroutine_and_generator_are_called_through_keeping_their_kind():
    from dsv41_flags.patch import Ledger

    class Base:
        async def am(self, x):
            return ["base", x]

        def gm(self, x):
            yield "base"
            yield x

    class Sub(Base):
        pass

    ledger = Ledger()
    handed = {}

    def make(name, tag):
        def wrap(original):
            handed[name] = original
            if inspect.iscoroutinefunction(original):
                async def am(self, x):
                    return [tag] + await original(self, x)
                return am

            def gm(self, x):
                yield tag
                yield from original(self, x)
            return gm
        return wrap

    for attr in ("am", "gm"):
        ledger.patch("sub", Sub, attr, make(attr, "sub"))
        ledger.patch("base", Base, attr, make(attr, "base-patch"))
    assert inspect.iscoroutinefunction(handed["am"]) and inspect.isgeneratorfunction(handed["gm"])
    assert asyncio.run(Sub().am(1)) == ["sub", "base-patch", "base", 1]
    assert list(Sub().gm(1)) == ["sub", "base-patch", "base", 1]
    ledger.uninstall("base")
    assert asyncio.run(Sub().am(1)) == ["sub", "base", 1] and list(Sub().gm(1)) == ["sub", "base", 1]
    ledger.uninstall("sub")
    assert vars(Sub).keys() == {"__module__", "__doc__"}


def test_an_inherited_property_setter_and_deleter_run_the_base_property_of_call_time():
    from dsv41_flags.patch import Ledger
    log = []

    class Base:
        @property
        def p(self):
            return ["base"]

        @p.setter
        def p(self, value):
            log.append(("base set", value))

        @p.deleter
        def p(self):
            log.append("base del")

    class Sub(Base):
        pass

    ledger = Ledger()
    ledger.patch("sub", Sub, "p", lambda original: property(
        lambda self: ["sub"] + original.fget(self), original.fset, original.fdel))
    ledger.patch("base", Base, "p", lambda original: property(
        lambda self: ["base-patch"] + original.fget(self),
        lambda self, value: (log.append("base-patch set"), original.fset(self, value)), original.fdel))
    obj = Sub()
    assert obj.p == ["sub", "base-patch", "base"]
    obj.p = 5
    del obj.p
    assert log == ["base-patch set", ("base set", 5), "base del"]
    ledger.uninstall("sub")
    ledger.uninstall("base")
    assert "p" not in vars(Sub) and Sub().p == ["base"]


def _echo(*args):
    return list(args)


def _tagged(tag, original, *args):
    return [tag] + original(*args)


def test_a_base_patch_that_a_captured_subclass_patch_would_never_reach_is_refused_as_a_conflict():
    """A callable object (here a functools.partial) cannot be called through at call time: the
    subclass's patch captured it, so a later base patch is refused; patched the other way round
    (base first) it composes by capture and the base's uninstall waits for the subclass's."""
    from dsv41_flags.errors import PatchConflict
    from dsv41_flags.patch import Ledger

    def fresh():
        class Base:
            f = functools.partial(_echo, "base")

        class Sub(Base):
            pass
        return Base, Sub

    def make(tag):  # a partial for a partial: stored as is in the class, never bound
        return lambda original: functools.partial(_tagged, tag, original)

    Base, Sub = fresh()
    stock = vars(Base)["f"]
    ledger = Ledger()
    ledger.patch("sub", Sub, "f", make("sub"))
    with pytest.raises(PatchConflict, match=r"'base'.*Base\.f.*'sub'.*Sub\.f"):
        ledger.patch("base", Base, "f", make("base"))
    assert vars(Base)["f"] is stock and [r.feature for r in ledger.records()] == ["sub"]
    ledger.uninstall("sub")
    assert "f" not in vars(Sub)

    Base, Sub = fresh()
    stock = vars(Base)["f"]
    ledger.patch("base", Base, "f", make("base"))
    ledger.patch("sub", Sub, "f", make("sub"))
    assert Sub.f("x") == ["sub", "base", "base", "x"]
    assert [r.feature for r in ledger.uninstall("base")] == ["base"]      # sub captured it
    ledger.uninstall("sub")
    assert ledger.uninstall("base") == [] and vars(Base)["f"] is stock and "f" not in vars(Sub)


def test_overlapping_lists_the_patches_on_one_attribute_of_a_class_hierarchy_in_application_order():
    from dsv41_flags.patch import Ledger
    classes = _hierarchy()
    ledger = Ledger()
    sub = ledger.patch("sub", classes["B"], "m", _tagging("sub", "m"))
    base = ledger.patch("base", classes["A"], "m", _tagging("base", "m"))
    other = ledger.patch("other", classes["A"], "c", _tagging("other", "c"))
    assert ledger.overlapping(base) == ledger.overlapping(sub) == [sub, base]
    assert ledger.overlapping(other) == [other]
    ledger.uninstall("sub"), ledger.uninstall("base"), ledger.uninstall("other")


# -- every restore is independent of the others ---------------------------------------------------

class _Locked(type):
    """A metaclass that refuses every attribute change once ``locked`` is set on the class."""

    def __setattr__(cls, name, value):
        if vars(cls).get("locked"):
            raise RuntimeError(f"{cls.__name__} is locked")
        super().__setattr__(name, value)

    def __delattr__(cls, name):
        if vars(cls).get("locked"):
            raise RuntimeError(f"{cls.__name__} is locked")
        super().__delattr__(name)


def test_a_restore_an_owner_refuses_is_kept_with_its_reason_and_every_other_restore_is_done():
    from dsv41_flags.patch import Ledger

    class Free:
        def m(self):
            return "free"

    class Base(metaclass=_Locked):
        def m(self):
            return "base"

    class Sub(Base):
        pass

    ledger = Ledger()
    for owner in (Free, Base, Sub):
        ledger.patch("f", owner, "m", _tagging("f", "m"))
    for owner in (Base, Sub):                 # each class locked by its own flag
        type.__setattr__(owner, "locked", True)
    kept = ledger.uninstall("f")
    assert sorted(r.attr + " of " + r.owner.__name__ for r in kept) == ["m of Base", "m of Sub"]
    assert all(r.failure.startswith("RuntimeError: ") and "locked" in r.failure for r in kept)
    assert Free().m() == "free"                                    # restored all the same
    for owner in (Base, Sub):
        type.__setattr__(owner, "locked", False)
    assert ledger.uninstall("f") == [] and ledger.records() == []
    assert Base().m() == "base" and "m" not in vars(Sub)


@pytest.mark.parametrize("first", ["class-first", "instance-first"])
@pytest.mark.parametrize("attr", ["m", "c", "s"], ids=["method", "classmethod", "staticmethod"])
def test_patches_on_an_object_and_its_class_compose_in_either_order(attr, first):
    from dsv41_flags.patch import Ledger
    A = _hierarchy()["A"]
    a = A()
    read = {"m": lambda: a.m("x"), "c": lambda: a.c("x"), "s": lambda: a.s("x")}[attr]
    stock = read()
    ledger = Ledger()
    steps = [("cls", A), ("obj", a)] if first == "class-first" else [("obj", a), ("cls", A)]
    for feature, owner in steps:
        ledger.patch(feature, owner, attr, _tagging(feature, attr))
    assert read()[:2] == ["obj", "cls"]
    ledger.uninstall("cls")
    assert read() == ["obj"] + stock                     # the object follows its class back
    ledger.uninstall("obj")
    assert vars(a) == {} and read() == stock
