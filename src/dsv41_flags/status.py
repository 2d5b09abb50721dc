"""The status record of a feature, built once, and the two answers made of it.

``feature_record`` builds the one per-feature record; the answers only pick from it:

* ``preview`` -> the rows of ``dsv41-flags status`` / ``status --json`` / ``validate`` / ``check``
  (what a boot would reach before importing targets, with the static drift found without
  importing): ``{"name", "state", "value", "source", "target", "engine", "engine_version",
  "target_found", "missing", "undecided", "live", "detail", "options": {option: {"value",
  "source"}}}``;
* ``process_status`` -> one process's answer to ``status --url`` (the engine's RPC and HTTP
  route): ``{pid, process, role, ranks..., **extra, "generation", "profile", "settings_files",
  "fingerprint", "features": [{"name", "state", "value", "source", "target", "detail",
  "duration_ms", "patches", "live", "engine", "options": {option: value}}], "switches",
  "switches_dropped", "warnings", "notes"}``.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from dsv41_flags.declare import Feature
from dsv41_flags.drift import engine_version
from dsv41_flags.runtime import FeatureState, Runtime
from dsv41_flags.state import State

#: the keys of a ``status`` row, in order
PREVIEW_KEYS = ("name", "state", "value", "source", "target", "engine", "engine_version",
                "target_found", "missing", "undecided", "live", "detail", "options")
#: the keys of a feature in a process's answer, in order
PROCESS_KEYS = ("name", "state", "value", "source", "target", "detail", "duration_ms", "patches",
                "live", "engine", "options")


def feature_record(runtime: Runtime, st: FeatureState, *, missing: Sequence[str] = (),
                   undecided: Sequence[str] = (), target_found: bool | None = None) -> dict[str, Any]:
    """Everything known about one feature: the FeatureState ``st`` (name, state, value, source,
    target, detail, duration_ms, patches, live), its ``engine`` range and the installed
    ``engine_version`` (None when not installed or no engine), ``options`` (option -> ``{"value",
    "source"}``), ``missing`` (drift found without importing: text per requirement),
    ``undecided`` (requirements only the live check at import can decide: never drift) and
    ``target_found`` (the target's source was found; None when not looked up)."""
    feature: Feature = runtime.features[st.name]
    return {**st.to_dict(), "engine": feature.engine, "engine_version": engine_version(feature),
            "options": runtime.option_report(feature), "missing": list(missing),
            "undecided": list(undecided), "target_found": target_found}


def preview(runtime: Runtime, found: Mapping[str, tuple[list[str], str | None]],
            names: Sequence[str] | None = None, *,
            undecided: Mapping[str, Sequence[str]] | None = None) -> list[dict[str, Any]]:
    """The ``status`` rows of ``names`` (default: every feature, install order): the state a boot
    would reach before importing targets (``Runtime.preview``), with ``found[name] = (missing,
    target source file or None)`` from the static check and ``undecided[name]`` (what only the
    live check can decide: listed, never drift). ``detail`` is shown for
    ``fixed-upstream`` only (a drifted row lists ``missing``)."""
    states = {st.name: st for st in runtime.preview({n: m for n, (m, _) in found.items()})}
    rows = []
    for name in names if names is not None else list(runtime.features):
        missing, source = found.get(name, ([], None))
        record = feature_record(runtime, states[name], missing=missing,
                                undecided=(undecided or {}).get(name, ()),
                                target_found=source is not None)
        if record["state"] != State.FIXED_UPSTREAM:
            record["detail"] = ""
        rows.append({k: record[k] for k in PREVIEW_KEYS})
    return rows


def process_status(runtime: Runtime, **extra: Any) -> dict[str, Any]:
    """This process's answer to ``dsv41-flags status --url`` (see the module docstring):
    the process fields (``pid, process, role, tp_rank, pp_rank, dp_rank`` when known), ``extra``
    (e.g. ``step``), ``generation`` (switches applied here), ``switches`` (every kept Toggle, the
    audit record: the last ``live.HISTORY_LIMIT``), ``switches_dropped`` (older ones let go) and
    each feature's record now."""
    features = []
    for st in runtime.states():
        record = feature_record(runtime, st)
        record["options"] = {name: o["value"] for name, o in record["options"].items()}
        features.append({k: record[k] for k in PROCESS_KEYS})
    return {**runtime.context.as_fields(), **extra,
            "generation": runtime.live.generation,
            "profile": runtime.resolution.profile,
            "settings_files": list(runtime.resolution.files),
            "fingerprint": runtime.fingerprint.digest,
            "features": features,
            "switches": [t.to_dict() for t in runtime.live.history],
            "switches_dropped": runtime.live.dropped,
            "warnings": [p.message for p in runtime.resolution.warnings],
            "notes": list(runtime.resolution.notes)}
