"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

The launch value and its one codec for children (the snapshot).

A launch is resolved once, in the process that starts it; every child receives the same value
through ``DSV41_SNAPSHOT`` instead of resolving again. ``Launch`` is that value: the resolution,
the fingerprint, the feature set (the features directory with a sha256 of every feature file that
was imported, and the entry points that were loaded) and the launch facts (pid and ``DSV41_*``
variables of the launching process).

This module is the whole codec, both directions: ``encode`` is the only writer (``Launch.to_dict``
and the ``*_to_dict`` functions of its records), ``decode`` + ``materialize`` the only reader
(``Launch.from_dict`` and the ``*_from_dict`` functions). The reader treats the variable as
untrusted text:

* schema: the pydantic models of ``snapshot_schema`` (``SnapshotWire`` and its parts: frozen, no
  unknown key, strict JSON types) check version, keys and types (``SnapshotError`` naming the path and what is
  accepted, never a KeyError);
* values: every flag and option value, and every reserved setting, must be the JSON value the
  launch writes for a value its declaration accepts (``typed_value``: a flag is a JSON boolean,
  never ``"on"`` or ``1`` as a variable may spell it; bounds and choices checked again); a key no
  loaded feature owns is refused;
* secrets: a key whose name marks a secret (``secrecy.is_secret``) carries no value, only its
  source; the child reads it again there (the variable it inherited, or the settings file) and
  casts it as the launch did, or says that it cannot (SnapshotError naming key and source);
* code: an entry point is loaded only when an installed distribution declares it in the group
  ``dsv41_flags.features``; a feature file only when it lies in the launch's features directory
  and its content still has the sha256 the launch recorded (the verified bytes are what runs, so a
  file edited during the launch is refused and every rank runs the code the launch chose);
* declarations: the launch records every feature's declaration (``declaration_of``: the repr of
  every field but ``install`` and where it came from) and a child's must equal it: the same bytes
  can declare something else in another process (a name, target or ``requires`` computed from the
  environment, the time, a random number), which would otherwise never be hooked. A child
  validates every declaration as the launch did;
* size: above ``SPILL_BYTES`` the JSON goes to a private file (``files.write_atomic``, mode 0600)
  and the variable carries ``file:<path>#sha256=<hex>``; the reader checks owner and mode
  (``files.owned_privately``) and digest.
  Linux refuses any single environment string over 128 KiB (MAX_ARG_STRLEN) at exec.

Trust model: the environment is trusted like ``PYTHONPATH`` (whoever sets it can run code
anyway). The snapshot guarantees integrity against accidental change (edited feature files, a
stale or damaged value, ill-typed values; the fingerprint digest is recomputed from its payload),
not authenticity: its features directory, file digests and fingerprint all come from the same
variable. Within that it can only choose among values the declarations accept and code that the
installed distributions or regular files directly in its features directory already are. Every
file is read with ``files.read_regular`` (never blocks, size-capped) and any failure while
reading it is a SnapshotError (``read``).
"""

import hashlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple, Sequence


from dsv41_flags.declare import Feature
from dsv41_flags.discovery import discover, feature_entry_points
from dsv41_flags.errors import Problem, SnapshotError
from dsv41_flags.text import quoted, exception_text
from dsv41_flags.files import (FEATURE_MAX_BYTES, SNAPSHOT_MAX_BYTES, FileRefused, owned_privately,
                               read_regular, write_atomic)
from dsv41_flags.fingerprint import Fingerprint, canonical
from dsv41_flags.names import DECLARED_DEFAULT, RESERVED_TYPES, SNAPSHOT_VAR
from dsv41_flags.resolution import EMPTY, Resolution, Resolved
from dsv41_flags.wire import dumps, jsonable
from dsv41_flags.secrecy import MASK, is_secret, secret_names
from dsv41_flags.values import CastError, Kind, cast, cast_bool

VERSION = 3
#: above this many bytes the encoded launch is spilled to a private file (Linux: 128 KiB per string)
SPILL_BYTES = 32 * 1024
FILE_PREFIX = "file:"
_SPILL = r"^file:(?P<path>/.+)#sha256=(?P<digest>[0-9a-f]{64})$"  # compiled where a value has the prefix


class Launch(NamedTuple):
    """One launch, as resolved by its launching process.

    resolution: the Resolution; fingerprint: the launch Fingerprint; features_dir: directory the
    feature files were read from (None: none); feature_files: ``((path, sha256), ...)`` of every
    feature file imported; entry_points: ``((name, value), ...)`` of group
    ``dsv41_flags.features`` loaded; pid: pid of the launching process; env: its ``DSV41_*``
    variables (``DSV41_SNAPSHOT`` excluded); declarations: feature name -> ``declaration_of``
    (field -> repr) of every feature.
    """

    resolution: Resolution
    fingerprint: Fingerprint
    features_dir: str | None = None
    feature_files: tuple[tuple[str, str], ...] = ()
    entry_points: tuple[tuple[str, str], ...] = ()
    pid: int | None = None
    env: Mapping[str, str] = EMPTY
    declarations: Mapping[str, Mapping[str, str]] = EMPTY

    @classmethod
    def of(cls, resolution: Resolution, fingerprint: Fingerprint, features: Sequence[Feature],
           features_dir: Path | str | None, env: Mapping[str, str], pid: int | None = None) -> "Launch":
        """The launch of ``features`` (their files and digests, their entry points)."""
        files = sorted({(f.source, f.source_sha256) for f in features if not f.entry_point and f.source})
        eps = sorted({tuple(f.entry_point) for f in features if f.entry_point})
        return cls(resolution, fingerprint, str(features_dir) if features_dir else None,
                   tuple(files), tuple(eps), os.getpid() if pid is None else pid, dict(env),
                   declarations_of(features))

    def to_dict(self) -> dict:
        """JSON-ready form (schema version ``VERSION``)."""
        return {"v": VERSION, "pid": self.pid, "env": dict(self.env),
                "resolution": resolution_to_dict(self.resolution),
                "fingerprint": fingerprint_to_dict(self.fingerprint),
                "features_dir": self.features_dir,
                "feature_files": [list(p) for p in self.feature_files],
                "entry_points": [list(p) for p in self.entry_points],
                "declarations": {n: dict(d) for n, d in self.declarations.items()}}

    @classmethod
    def from_dict(cls, data: Mapping, features: Sequence[Feature],
                  sources: Mapping[Path, bytes]) -> "Launch":
        """Inverse of ``to_dict`` for a ``decode``-checked dict whose code was loaded:
        ``features`` (built from the verified code) and ``sources`` (path -> the verified bytes of
        each feature file). Every value is checked by its JSON type and its feature's
        declared type and bounds (``resolution_from_dict``). Raises SnapshotError."""
        return cls(resolution_from_dict(data["resolution"], features),
                   fingerprint_from_dict(data["fingerprint"]), data["features_dir"],
                   tuple(sorted((str(p), sha256_bytes(b)) for p, b in sources.items())),
                   tuple(sorted(map(tuple, data["entry_points"]))),
                   data["pid"], dict(data["env"]), declarations_of(features))


# --------------------------------------------------------------- the records, both directions
def resolved_to_dict(resolved: Resolved, secret: bool = False) -> dict:
    """JSON-ready dict of one resolved key (tuples as lists). A ``secret`` key carries no value:
    ``value`` None, every chain value ``MASK`` and ``"secret": true`` (the child reads it again
    from its source: ``resolved_from_dict``)."""
    if secret:
        return {"key": resolved.key, "feature": resolved.feature, "option": resolved.option,
                "value": None, "source": resolved.source, "secret": True,
                "chain": [[s, MASK] for s, _ in resolved.chain]}
    return {"key": resolved.key, "feature": resolved.feature, "option": resolved.option,
            "value": jsonable(resolved.value), "source": resolved.source,
            "chain": [[s, jsonable(v)] for s, v in resolved.chain]}


def _secret_value(key: str, entry: Mapping, feature: Feature, option) -> Any:
    """The value of a secret ``key`` whose entry carries none: the declared default, or the raw
    value read again at its source (``settings.reread``: the variable this process inherited, or
    the settings file) and cast as the launch cast it. Raises SnapshotError naming the key and
    the source, never the value."""
    source = entry["source"]
    if source == DECLARED_DEFAULT:
        return feature.default if option is None else option.default
    # only a launch with a secret needs the settings reader in a child
    from dsv41_flags.settings import cast_layer, reread

    caster = cast_bool if option is None else option.cast
    kind = Kind.BOOL if option is None else option.kind
    try:
        return cast_layer(key, kind, caster, source, reread(key, source))
    except LookupError as exc:
        raise _fail(f"secret {key}: the snapshot carries no secret value and it cannot be read "
                    f"again from {source}: {exc}") from None
    except CastError as exc:
        raise _fail(f"secret {key}: the value read again from {source} ({MASK}) is not a valid "
                    f"value; accepted: {exc.accepted}") from None


#: how each JSON type is named in a refusal
_JSON_KINDS = {bool: "a JSON boolean (true or false)", int: "a JSON integer", str: "a JSON string",
               float: "a JSON number with a fraction (1.0)", list: "a JSON array",
               dict: "a JSON object", type(None): "null"}


def typed_value(where: str, what: str, caster: Callable[[Any], Any], raw: Any) -> Any:
    """The typed value of the snapshot value ``raw``, checked by its JSON type: ``caster(raw)``
    (the declared type, bounds and choices) and then ``raw`` must be exactly the JSON the launch
    writes for that value (``jsonable``). So a flag is a JSON boolean: ``"on"``, ``"1"`` or ``1``
    are spellings a variable may use, and a snapshot value is never cast like a variable; an int
    option is a JSON integer, never ``"5"``. Raises SnapshotError naming ``where`` (the key and
    the value), ``what`` (``flag X``) and what is accepted."""
    try:
        value = caster(raw)
    except CastError as exc:
        raise _fail(f"{where} is not a valid value for {what}; accepted: {exc.accepted}") from None
    written = jsonable(value)
    if dumps(written) != dumps(raw):
        raise _fail(f"{where} is not a valid value for {what}; accepted: "
                    f"{_JSON_KINDS.get(type(written), 'JSON')}, as the launch writes it "
                    f"({_short(dumps(written))} for this value), not {_JSON_KINDS.get(type(raw), 'JSON')}")
    return value


def resolved_from_dict(key: str, entry: Mapping, feature: Feature) -> Resolved:
    """Inverse of ``resolved_to_dict`` for ``key`` of ``feature``: the value checked by its JSON
    type and the feature's declared type and bounds (``typed_value``). Raises SnapshotError
    naming the key and what is wrong."""
    where = f"snapshot value {key}={_short(entry['value'])}"
    keys = feature.keys()
    if key not in keys:
        raise _fail(f"{where}: feature {quoted(feature.name)} owns no key {key}")
    option = keys[key]
    if entry["feature"] != feature.name or entry["option"] != (option.name if option else None):
        raise _fail(f"{where}: labelled feature={quoted(entry['feature'])} option={quoted(entry['option'])}, but "
                    f"the key belongs to feature {quoted(feature.name)}"
                    + (f" option {quoted(option.name)}" if option else " (its flag)"))
    if entry.get("secret") is True:
        chain = tuple((s, v) for s, v in entry["chain"])
        return Resolved(key, feature.name, option.name if option else None,
                        _secret_value(key, entry, feature, option), entry["source"], chain)
    value = typed_value(where, f"flag {key}" if option is None else f"{option.kind} option {key}",
                        cast_bool if option is None else option.cast, entry["value"])
    chain = tuple((s, tuple(v) if isinstance(v, list) else v) for s, v in entry["chain"])
    return Resolved(key, feature.name, option.name if option else None, value, entry["source"], chain)


def resolution_to_dict(resolution: Resolution) -> dict:
    """JSON-ready form of a resolution (``reserved_values`` stays out: ``explain`` only). A key
    whose name marks a secret (``secrecy.is_secret``) carries no value (``resolved_to_dict``)."""
    secrets = secret_names(resolution)
    return {"profile": resolution.profile, "profiles": list(resolution.profiles),
            "files": list(resolution.files),
            "values": {k: resolved_to_dict(v, bool(is_secret(k, secrets)))
                       for k, v in resolution.values.items()},
            "reserved": {k: jsonable(v) for k, v in resolution.reserved.items()},
            "volatile_sources": dict(resolution.volatile_sources),
            "problems": [[p.key, p.origin, p.message, p.severity] for p in resolution.problems],
            "notes": list(resolution.notes)}


def resolution_from_dict(res: Mapping, features: Sequence[Feature]) -> Resolution:
    """Inverse of ``resolution_to_dict`` for a ``decode``-checked dict: every key must belong to
    one of ``features`` (checked by ``resolved_from_dict``) and every key of them be present;
    reserved settings checked by their declared types (``typed_value``). Raises SnapshotError."""
    by_key = {k: f for f in features for k in f.keys()}
    values: dict[str, Resolved] = {}
    for key, entry in res["values"].items():
        feature = by_key.get(key)
        if feature is None:
            raise _fail(f"key {key} belongs to no feature of the launch "
                        f"({', '.join(sorted(f.name for f in features)) or 'none'})")
        values[key] = resolved_from_dict(key, entry, feature)
    missing = sorted(set(by_key) - set(values))
    if missing:
        raise _fail(f"no value for key(s) {', '.join(missing)} of the launch's features")
    return Resolution(
        profile=res["profile"], profiles=tuple(res["profiles"]), files=tuple(res["files"]),
        values=values, reserved=_reserved(res["reserved"]),
        volatile_sources=dict(res.get("volatile_sources", {})),
        problems=tuple(Problem(*p) for p in res.get("problems", [])),
        notes=tuple(res.get("notes", [])))


def fingerprint_to_dict(fingerprint: Fingerprint) -> dict:
    """JSON-ready form (``digest``, ``payload``, ``excluded``); ``included`` (explanations only,
    one per key of the payload) stays out to keep the snapshot small."""
    return {"digest": fingerprint.digest, "payload": dict(fingerprint.payload),
            "excluded": dict(fingerprint.excluded)}


def fingerprint_from_dict(d: Mapping) -> Fingerprint:
    """Inverse of ``fingerprint_to_dict`` for a ``decode``-checked dict (its digest was checked
    against its payload there)."""
    return Fingerprint(d["digest"], d["payload"], d.get("excluded", {}))


def declaration_of(feature: Feature) -> dict[str, str]:
    """Field -> repr of what ``feature`` declares: every compared field but ``install`` (a
    function: its repr names an address), i.e. name, target, summary, requires, engine, fixed_in,
    volatile, options, refs, after, default, live. Equal in two processes exactly when they built
    the same declaration (reprs of str, bool, tuples and Options are deterministic)."""
    from dataclasses import fields

    def text(value: Any) -> str:
        try:
            return repr(value)
        except Exception:  # a field of an unchecked type (a summary object whose repr raises)
            return f"<unrepresentable {type(value).__qualname__}>"

    return {f.name: text(getattr(feature, f.name)) for f in fields(feature)
            if f.compare and f.name != "install"}


def declarations_of(features: Sequence[Feature]) -> dict[str, dict[str, str]]:
    """Feature name -> ``declaration_of`` of each of ``features``."""
    return {f.name: declaration_of(f) for f in features}


def sha256_bytes(data: bytes) -> str:
    """Hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


# ------------------------------------------------------------------------------- encode
def encode(launch: Launch, *, spill_bytes: int = SPILL_BYTES, spill_dir: str | None = None) -> str:
    """The value of ``DSV41_SNAPSHOT`` for ``launch``: compact JSON, or, above ``spill_bytes``,
    ``file:<path>#sha256=<hex>`` naming a private file (0600, ``files.write_atomic`` in
    ``spill_dir`` / the temporary directory) that holds the JSON. Raises OSError when the file
    cannot be written (nothing half-written is left)."""
    text = dumps(launch.to_dict(), separators=(",", ":"))
    if len(text) <= spill_bytes:
        return text
    data = text.encode()
    name = f"dsv41-launch-{os.getpid()}-{os.urandom(8).hex()}.json"
    path = Path(spill_dir or tempfile.gettempdir()) / name
    write_atomic(path, data, mode=0o600)
    return f"{FILE_PREFIX}{path}#sha256={sha256_bytes(data)}"


def spill_path(raw: str) -> str | None:
    """The spill file named by a ``DSV41_SNAPSHOT`` value, or None when it carries JSON."""
    if not isinstance(raw, str) or not raw.startswith(FILE_PREFIX):
        return None
    m = re.match(_SPILL, raw, re.S)
    return m["path"] if m else None


# ------------------------------------------------------------------------------- decode
def _fail(what: str, hint: str = "") -> SnapshotError:
    return SnapshotError(f"{SNAPSHOT_VAR} refused: {what}" + (f" ({hint})" if hint else ""))


def _text(raw: str) -> str:
    """The JSON text of a snapshot value, reading and verifying a spill file."""
    if not isinstance(raw, str) or not raw.strip():
        raise _fail("it is empty")
    if not raw.startswith(FILE_PREFIX):
        return raw
    m = re.match(_SPILL, raw, re.S)
    if not m:
        raise _fail(f"{quoted(raw)} is not 'file:<absolute path>#sha256=<64 hex>'")
    path = m["path"]

    try:
        data = read_regular(path, SNAPSHOT_MAX_BYTES, follow_symlinks=False, check=owned_privately(path))
    except FileRefused as exc:
        raise _fail(f"spill file {exc}") from None
    if sha256_bytes(data) != m["digest"]:
        raise _fail(f"spill file {path} does not have the sha256 the variable names "
                    f"(changed since the launch wrote it)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise _fail(f"spill file {path} is not UTF-8") from None


def _short(value: Any) -> str:
    return quoted(value, 80)


def decode(raw: str) -> dict:
    """Parse and schema-check a ``DSV41_SNAPSHOT`` value (JSON or a spill reference).

    Returns the checked dict (``SnapshotWire`` validated it; values not yet checked: see
    ``materialize``). Raises SnapshotError naming what is wrong; never KeyError/TypeError."""
    text = _text(raw)
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise _fail(f"not JSON ({exc})" if not isinstance(exc, RecursionError) else "nested too deep",
                    "a value written by dsv41_flags is expected: unset the variable") from None
    if not isinstance(data, dict):
        raise _fail(f"{_short(data)} is not a JSON object")
    version = data.get("v")
    if version != VERSION or isinstance(version, bool):
        raise _fail(f"schema version {_short(version)} is not {VERSION}",
                    "written by another version of dsv41_flags? unset it or relaunch")
    from dsv41_flags.snapshot_schema import SnapshotWire, problem  # pydantic: where one is read

    wrong = problem(SnapshotWire, data, "snapshot")
    if wrong:
        raise _fail(wrong)
    fp = data["fingerprint"]
    recomputed = hashlib.sha256(canonical(fp["payload"])).hexdigest()
    if recomputed != fp["digest"]:
        raise _fail(f"snapshot.fingerprint.digest {fp['digest'][:12]}... is not the sha256 of its "
                    f"payload ({recomputed[:12]}...)", "the value was edited or damaged: relaunch")
    for key, entry in data["resolution"]["values"].items():
        if entry["key"] != key:
            raise _fail(f"snapshot.resolution.values[{quoted(key)}].key = {quoted(entry['key'])} "
                        f"differs from its place {quoted(key)}")
    return data


def read(raw: str, *, discover_features=None,
         before_feature_code: Callable[[Mapping[str, Any], int | None], None] | None = None,
         ) -> tuple["Launch", tuple[Feature, ...]]:
    """``materialize(decode(raw))`` with one failure type: ANY exception while decoding or
    materialising (a digit limit, a recursion limit, an OS error, a feature module that raises)
    becomes SnapshotError naming it, so the caller's non-strict fallback to local resolution
    always applies. KeyboardInterrupt / SystemExit pass through.
    ``before_feature_code(reserved, launch_pid)``: called once the value is decoded and its
    reserved settings are checked (``reserved``: key -> typed value, ``LOG_FORMAT`` ...), before
    any feature module runs (the caller configures logging there)."""
    try:
        data = decode(raw)
        if before_feature_code is not None:
            before_feature_code(_reserved(data["resolution"]["reserved"]), data["pid"])
        return materialize(data, discover_features=discover_features)
    except SnapshotError:
        raise
    except Exception as exc:
        raise _fail(f"reading it raised {exception_text(exc)}") from exc


# -------------------------------------------------------------------------- materialize
def installed_entry_points() -> set[tuple[str, str]]:
    """``(name, value)`` of every entry point the installed distributions declare in the group."""
    return set(feature_entry_points())


def verified_sources(data: Mapping) -> dict[Path, bytes]:
    """Path -> bytes of every feature file the launch recorded, after checking that each lies
    directly in the launch's features directory or in the shipped features directory
    (``discovery.SHIPPED_FEATURES``) and still has its recorded sha256.
    Raises SnapshotError otherwise."""
    from dsv41_flags.discovery import SHIPPED_FEATURES

    files = data["feature_files"]
    base = Path(data["features_dir"]).resolve() if data["features_dir"] else None
    out: dict[Path, bytes] = {}
    for name, digest in files:
        path = Path(name)
        if not path.is_absolute() or path.suffix != ".py" or \
                path.resolve().parent not in (base, SHIPPED_FEATURES):
            raise _fail(f"feature file {name} is not a *.py file directly in features_dir {base} "
                        f"or in the shipped features ({SHIPPED_FEATURES})")
        try:  # a regular file, not a symlink, never blocking (a FIFO is refused, not waited on)
            data_bytes = read_regular(path, FEATURE_MAX_BYTES, follow_symlinks=False)
        except FileRefused as exc:
            raise _fail(f"feature file {exc}") from None
        if sha256_bytes(data_bytes) != digest:
            raise _fail(f"feature file {name} changed since the launch read it (sha256 "
                        f"{sha256_bytes(data_bytes)[:12]}... here, {digest[:12]}... in the launch)",
                        "every process of a launch must run the same feature code: relaunch")
        out[path.resolve()] = data_bytes
    return out


def _reserved(reserved: Mapping) -> dict[str, Any]:
    """The reserved settings of a snapshot, each checked by its declared type (``typed_value``)
    and ``FINGERPRINT`` by its shape. Raises SnapshotError."""
    out: dict[str, Any] = {}
    for key, (kind, _default, choices) in RESERVED_TYPES.items():
        if key not in reserved:
            raise _fail(f"reserved setting {key} is missing")
        out[key] = typed_value(f"reserved setting {key}={_short(reserved[key])}", f"{kind} setting {key}",
                               lambda v, kind=kind, choices=choices: cast(kind, v, choices=choices),
                               reserved[key])
    from dsv41_flags.snapshot_schema import FINGERPRINT_SETTING, problem

    fp = reserved.get("FINGERPRINT")
    wrong = problem(FINGERPRINT_SETTING, fp, "reserved setting FINGERPRINT")
    if wrong:
        raise _fail(wrong)
    out["FINGERPRINT"] = {name: tuple(v) if isinstance(v, list) else dict(v) for name, v in fp.items()}
    for name in ("prefixes", "volatile", "volatile_argv"):
        if not isinstance(out["FINGERPRINT"].get(name, ()), tuple):
            raise _fail(f"reserved setting FINGERPRINT.{name} is not a list of strings")
    out["FLEET"] = _fleet(reserved.get("FLEET", {}))
    extra = sorted(set(reserved) - set(out))
    if extra:
        raise _fail(f"unknown reserved setting(s) {', '.join(extra)}")
    return out


def _fleet(table: Any) -> dict[str, Any]:
    """The snapshot's fleet table: ``{}`` or ``{"settings": FleetSettings, "sources": {field:
    source}, "context": {"targeting_key": str, "attributes": {str: str|int|float|bool}}}`` in
    JSON form (``context`` once the launch read the flag service), checked by the model. Raises
    SnapshotError."""
    if table == {}:
        return {}
    from pydantic import ValidationError

    from dsv41_flags.fleet_settings import from_wire, problem_text

    context = table.get("context", {}) if isinstance(table, dict) else None
    if not (isinstance(context, dict) and set(context) <= {"targeting_key", "attributes"}
            and isinstance(context.get("targeting_key", ""), str)
            and isinstance(context.get("attributes", {}), dict)
            and all(isinstance(k, str) and isinstance(v, (str, int, float, bool))
                    for k, v in context.get("attributes", {}).items())):
        raise _fail("reserved setting FLEET.context is not {targeting_key, attributes}")
    if not (isinstance(table, dict) and set(table) - {"context"} == {"settings", "sources"}
            and isinstance(table["sources"], dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in table["sources"].items())
            and isinstance(table["settings"], dict)):
        raise _fail("reserved setting FLEET is not {settings, sources}")
    try:
        settings = from_wire(table["settings"]).model_dump(mode="json")
    except ValidationError as exc:
        field, why = problem_text(exc)[0]
        raise _fail(f"reserved setting FLEET.{field}: {why}") from None
    out = {"settings": settings, "sources": dict(table["sources"])}
    if "context" in table:
        out["context"] = {"targeting_key": context.get("targeting_key", ""),
                          "attributes": dict(context.get("attributes", {}))}
    return out


def materialize(data: Mapping, *, discover_features=None) -> tuple[Launch, tuple[Feature, ...]]:
    """The Launch and its features from a ``decode``-checked dict.

    Entry points must be declared by an installed distribution; feature files must match their
    recorded sha256 (the verified bytes are what is executed); every value is checked by its JSON
    type and its feature's declared type and bounds; every key of every loaded feature must be present and no
    other. Raises SnapshotError (DeclarationError from a feature module that fails to import).
    """
    discover_features = discover_features or discover
    eps = [tuple(p) for p in data["entry_points"]]
    unknown = sorted(set(eps) - installed_entry_points()) if eps else []  # scan only when needed
    if unknown:
        raise _fail(f"entry point(s) {', '.join(f'{n} = {v}' for n, v in unknown)} are not declared "
                    f"by any installed distribution in group dsv41_flags.features",
                    "a snapshot never names code to load: only installed distributions do")
    sources = verified_sources(data)
    fdir = Path(data["features_dir"]) if data["features_dir"] else None
    features = discover_features(fdir, entry_points=eps, sources=sources)
    _same_declarations(features, data["declarations"])
    return Launch.from_dict(data, features, sources), features


def _same_declarations(features: Sequence[Feature], recorded: Mapping[str, Mapping[str, str]]) -> None:
    """Refuse (SnapshotError) unless ``features`` (built here from the verified code) declare
    exactly what the launch checked: the same features, field by field.
    The message names each field that differs, with its value here and in the launch."""
    here = {f.name: f for f in features}
    where = {f.name: f.source or ":".join(f.entry_point) or "?" for f in features}
    hint = ("a declaration must depend only on its file's bytes (not on the environment, the time, "
            "the process or a random number): fix the feature, then relaunch")
    for name in sorted(set(here) - set(recorded)):
        raise _fail(f"feature {quoted(name)} ({where[name]}) is declared here but not by the launch "
                    f"(the launch declared {', '.join(map(repr, sorted(recorded))) or 'none'})", hint)
    for name in sorted(set(recorded) - set(here)):
        raise _fail(f"feature {quoted(name)} of the launch is not declared here", hint)
    for name, feature in sorted(here.items()):
        mine, theirs = declaration_of(feature), recorded[name]
        differ = [k for k in sorted(set(mine) | set(theirs)) if mine.get(k) != theirs.get(k)]
        if differ:
            raise _fail(f"feature {quoted(name)} ({where[name]}) declares something else here than in the "
                        "launch: " + "; ".join(f"{k} = {_clip(mine.get(k, '(none)'))} here, "
                                               f"{_clip(theirs.get(k, '(none)'))} in the launch"
                                               for k in differ), hint)


def _clip(text: str) -> str:
    return text if len(text) <= 120 else text[:117] + "..."
