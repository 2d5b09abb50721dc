"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

The status record: one frozen, typed model per feature (``FeatureStatus``) and per process
(``ProcessStatus``), built by the runtime and read by ``dsv41-flags status`` / ``status --url``,
the engine's RPC and HTTP routes, the metrics and the upgrade gate. Its JSON form,
``model_dump(mode="json")``, is the one on the wire; ``WIRE`` validates it as received.

``preview`` gives the rows of ``status`` / ``validate`` / ``check`` (what a boot would reach before
importing targets), ``process_status`` one process's answer to ``status --url``, ``serving``
which armed features are in effect in a serving process.
"""
from __future__ import annotations

from typing import Annotated, Any, Mapping, Optional, Sequence

from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, StrictBool, StrictInt,
                      StrictStr, ValidationError, ValidationInfo)

from dsv41_flags.drift import engine_version
from dsv41_flags.state import State

TEXT_MAX = LIST_MAX = 4096  # longest text and list accepted from a server (``WIRE``)
#: the validation context of a record received from a server: text and lists are bounded
#: (``TEXT_MAX``, ``LIST_MAX``) and text must be Unicode (no lone surrogate); a record the
#: runtime builds itself is taken as it is (a path may carry ``surrogateescape`` bytes)
WIRE = {"wire": True}


def _bounded(limit: int) -> AfterValidator:
    def check(value, info: ValidationInfo):
        if not (info.context and info.context.get("wire")):
            return value
        if len(value) > limit:
            raise ValueError(f"{len(value)} long; at most {limit} are accepted")
        if isinstance(value, str):
            value.encode("utf-8")  # UnicodeEncodeError (a ValueError) for a lone surrogate
        return value
    return AfterValidator(check)


Text = Annotated[StrictStr, _bounded(TEXT_MAX)]
Count = Annotated[StrictInt, Field(ge=0)]
Texts = Annotated[tuple[Text, ...], _bounded(LIST_MAX)]


def first_problem(exc: ValidationError) -> str:
    """``where: what`` of the first problem of a record received (``WIRE``), ``(and N more)``
    when there are others: ``ranks.0.pid: Input should be a valid integer``."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "the answer"
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{where}: {first['msg']}{more}"


class Record(BaseModel):
    """A frozen record; fields it does not declare are kept as sent (a newer peer's)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    def replace(self, **update: Any):
        """A copy with ``update`` applied, validated (``model_copy`` does not validate)."""
        return type(self)(**{**dict(self), **update})


class OptionStatus(Record):
    """One option of a feature: its value (``secrecy.MASK`` for a secret) and where it came from."""

    value: Any = None
    source: Text = ""


class FeatureStatus(Record):
    """One feature in one process.

    state: a ``State`` (its word on the wire; the transitions are ``state.TRANSITIONS``);
    value / source: the flag now (a live switch overrides the resolved value until the next
    launch) and where it came from; target: module name; detail: missing names, the error, or the
    reason; duration_ms: install time (installed only); patches: ``Owner.attr`` patched; live: the
    feature may be switched while serving; engine / engine_version: the declared range and the
    installed version (None: not installed); options: option -> ``OptionStatus``; missing: drift
    found without importing; undecided: requirements only the live check at import can decide
    (never drift); target_found: the target's source was found (None: not looked up).
    """

    name: Text
    state: State
    value: Optional[StrictBool] = None
    source: Text = ""
    target: Text = ""
    detail: Text = ""
    duration_ms: Optional[float] = None
    patches: Texts = ()
    live: StrictBool = False
    engine: Text = ""
    engine_version: Optional[Text] = None
    options: Annotated[dict[Text, OptionStatus], _bounded(LIST_MAX)] = {}
    missing: Texts = ()
    undecided: Texts = ()
    target_found: Optional[StrictBool] = None


class Switch(Record):
    """One applied switch of a process's history (``live.Toggle.to_dict``)."""

    feature: Text
    old: StrictBool
    new: StrictBool
    generation: Count
    requested_by: Text = ""
    step: Optional[Count] = None
    at: Text = ""
    request_id: Text = ""
    changed: StrictBool = True


class Serving(Record):
    """Which armed features are in effect in a serving process: ``installed``, ``pending`` (target
    never imported here: ``armed`` or ``pending``) and ``other`` (name -> its state: drifted,
    failed, ...)."""

    installed: Texts = ()
    pending: Texts = ()
    other: Annotated[dict[Text, State], _bounded(LIST_MAX)] = {}


class RankId(Record):
    """Who a process is: its ranks (None when unknown) and pid."""

    tp_rank: Optional[Count] = None
    pp_rank: Optional[Count] = None
    dp_rank: Optional[Count] = None
    pid: Count


class ProcessStatus(RankId):
    """One process's status (``process_status``): who it is, its launch and each feature now;
    ``ok`` False with ``reason`` for a process of the launch that did not answer as one."""

    ok: StrictBool = True
    reason: Text = ""

    process: Text = ""
    role: Text = ""
    step: Optional[Count] = None
    serving: Optional[Serving] = None
    generation: Count = 0
    profile: Text = ""
    settings_files: Texts = ()
    fingerprint: Text = ""
    features: Annotated[tuple[FeatureStatus, ...], _bounded(LIST_MAX)] = ()
    switches: Annotated[tuple[Switch, ...], _bounded(LIST_MAX)] = ()
    switches_dropped: Count = 0
    warnings: Texts = ()
    notes: Texts = ()


class FleetFeature(Record):
    """One feature as the flag service drives it on one server (``fleet.Watcher``).

    flag: its flag's key; live: it may be switched while serving; fleet_value: the value the
    flag service gives this server (None: it has none, or could not be read); applied: the value
    in effect on the server; agrees: the two are the same (or the service has no value);
    reason: why they differ (``restart needed``, the refusal of a rank, ``unreachable``, a value
    of the wrong type, ...); changed_at: when ``fleet_value`` last changed (ISO 8601, UTC)."""

    feature: Text
    flag: Text
    live: StrictBool = False
    fleet_value: Optional[StrictBool] = None
    applied: Optional[StrictBool] = None
    agrees: StrictBool = True
    reason: Text = ""
    changed_at: Text = ""


class FleetStatus(Record):
    """The flag service of one server: which one (``provider``, ``where``: no secret), the
    server's targeting key (``instance_id``), whether it can be read now (``reachable``; since
    when it cannot: ``unreachable_since``, with ``problem``), its last read (``last_read``), the
    changes refused (``refused``), switches made (``switches``), changes coalesced into a later
    switch (``coalesced``) and each feature (``FleetFeature``)."""

    provider: Text
    where: Text = ""
    instance_id: Text = ""
    reachable: StrictBool = False
    unreachable_since: Text = ""
    problem: Text = ""
    last_read: Text = ""
    refused: Count = 0
    switches: Count = 0
    coalesced: Count = 0
    features: Annotated[tuple[FleetFeature, ...], _bounded(LIST_MAX)] = ()


class StatusAnswer(Record):
    """``GET /dsv41_flags/status``: ``{ok, groups, ranks, server, processes, error}``: each
    scheduler rank, the HTTP process (``server``) and every other process of the launch outside
    the schedulers (``processes``: the detokenizer, the data-parallel controller); ``fleet``: the
    flag service driving the server, when one is set (``FleetStatus``)."""

    ok: StrictBool
    ranks: Annotated[tuple[ProcessStatus, ...], _bounded(LIST_MAX)] = ()
    server: Optional[ProcessStatus] = None
    processes: Annotated[tuple[ProcessStatus, ...], _bounded(LIST_MAX)] = ()
    fleet: Optional[FleetStatus] = None
    error: Text = ""


def describe(runtime, st: FeatureStatus, **found: Any) -> FeatureStatus:
    """``st`` with what a report shows besides the recorded state: the feature's ``engine`` range
    and installed ``engine_version``, its ``options`` (``Runtime.option_report``) and ``found``
    (``missing``, ``undecided``, ``target_found``)."""
    feature = runtime.features[st.name]
    return st.replace(engine=feature.engine, engine_version=engine_version(feature),
                      options=runtime.option_report(feature), **found)


def preview(runtime, found: Mapping[str, tuple[list[str], str | None]],
            names: Sequence[str] | None = None, *,
            undecided: Mapping[str, Sequence[str]] | None = None) -> list[FeatureStatus]:
    """The ``status`` rows of ``names`` (default: every feature, install order): the state a boot
    would reach before importing targets (``Runtime.preview``), with ``found[name] = (missing,
    target source file or None)`` from the static check and ``undecided[name]`` (what only the
    live check can decide: listed, never drift). ``detail`` is shown for ``fixed-upstream`` only
    (a drifted row lists ``missing``)."""
    states = {st.name: st for st in runtime.preview({n: m for n, (m, _) in found.items()})}
    rows = []
    for name in names if names is not None else list(runtime.features):
        missing, source = found.get(name, ([], None))
        st = states[name]
        rows.append(describe(runtime, st, missing=tuple(missing),
                             undecided=tuple((undecided or {}).get(name, ())),
                             target_found=source is not None,
                             detail=st.detail if st.state == State.FIXED_UPSTREAM else ""))
    return rows


def serving(runtime) -> Serving:
    """Which armed features are in effect in this process (``Serving``)."""
    states = {s.name: s.state for s in runtime.states()}
    armed = [(f.name, states[f.name]) for f in runtime.armed()]
    return Serving(installed=tuple(n for n, s in armed if s == State.INSTALLED),
                   pending=tuple(n for n, s in armed if s.hooked),
                   other={n: s for n, s in armed if s != State.INSTALLED and not s.hooked})


def process_status(runtime, **extra: Any) -> ProcessStatus:
    """This process's answer to ``dsv41-flags status --url`` (see the module docstring): the
    process fields (``pid, process, role, tp_rank, pp_rank, dp_rank`` when known), ``extra``
    (``step``, ``serving``, ranks), ``generation`` (switches applied here), ``switches`` (every
    kept Toggle, the audit record: the last ``live.HISTORY_LIMIT``), ``switches_dropped`` (older
    ones let go) and each feature's record now (``describe``)."""
    return ProcessStatus(
        **{**runtime.context.as_fields(), **extra},
        generation=runtime.live.generation, profile=runtime.resolution.profile,
        settings_files=tuple(runtime.resolution.files), fingerprint=runtime.fingerprint.digest,
        features=tuple(describe(runtime, st) for st in runtime.states()),
        switches=tuple(Switch(**t.to_dict()) for t in runtime.live.history),
        switches_dropped=runtime.live.dropped,
        warnings=tuple(p.message for p in runtime.resolution.warnings),
        notes=tuple(runtime.resolution.notes))
