"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

The wire format of the snapshot (``DSV41_SNAPSHOT``) and of a cache sidecar, as pydantic
models: frozen, no unknown key, every field of the JSON type the launch writes (strict: ``"1"`` is
no integer, ``1`` no boolean). ``snapshot.decode`` and ``cache_keeping.read_sidecar`` check what
they read with ``problem``; values are then checked by their declarations (``snapshot.typed_value``).

Imported only where a snapshot or sidecar is read (a child process, a feature's install), never
where one is only written (the launching process does not load pydantic for it).
"""
from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, TypeAdapter, ValidationError

from dsv41_flags.text import quoted


class WireRecord(BaseModel):
    """A record of the snapshot as JSON: frozen, no unknown key, every field of the JSON type the
    launch writes (strict: ``"1"`` is no integer, ``1`` no boolean)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


Sha256 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
#: a JSON array of fixed length read as a tuple (strict tuples refuse JSON arrays)
Pair = Annotated[tuple[str, str], Field(strict=False)]


class ResolvedWire(WireRecord):
    """One resolved key (``resolved_to_dict``); ``value`` is checked by ``typed_value``."""

    key: str
    feature: str
    option: str | None
    value: Any
    source: str
    secret: bool = False
    chain: list[Annotated[tuple[str, Any], Field(strict=False)]]


class ResolutionWire(WireRecord):
    """The resolution (``resolution_to_dict``); ``reserved`` is checked by ``_reserved``."""

    profile: str
    profiles: list[str]
    files: list[str]
    values: dict[str, ResolvedWire]
    reserved: dict[str, Any]
    volatile_sources: dict[str, str] = {}
    problems: list[Annotated[tuple[str, str, str, str], Field(strict=False)]] = []
    notes: list[str] = []


Scalar = str | int | float | bool | None


class PayloadWire(WireRecord):
    """The fingerprint payload, in the snapshot and in a cache sidecar: what its digest is the
    sha256 of; each setting a JSON scalar or a list of them."""

    argv: list[str]
    env: dict[str, str]
    settings: dict[str, Scalar | list[Scalar]]


class FingerprintWire(WireRecord):
    """The fingerprint (``fingerprint_to_dict``)."""

    digest: Sha256
    payload: PayloadWire
    excluded: dict[str, str] = {}


class SnapshotWire(WireRecord):
    """The whole ``DSV41_SNAPSHOT`` value (``Launch.to_dict``), schema version ``VERSION``."""

    v: int
    pid: int | None
    env: dict[str, str]
    resolution: ResolutionWire
    fingerprint: FingerprintWire
    features_dir: str | None
    feature_files: list[Annotated[tuple[str, Sha256], Field(strict=False)]]
    entry_points: list[Pair]
    declarations: dict[str, dict[str, str]]


#: ``FINGERPRINT`` among the reserved settings: lists of strings, or string -> string tables
FINGERPRINT_SETTING = TypeAdapter(dict[str, list[str] | dict[str, str]], config=ConfigDict(strict=True))


def problem(schema: type[BaseModel] | TypeAdapter, data: Any, root: str) -> str | None:
    """Why ``data`` (JSON as ``json.loads`` reads it) does not fit ``schema`` (a model above, or
    a TypeAdapter), or None when it does: the first error, naming its path under ``root`` and what
    is accepted (pydantic's message: ``snapshot.pid = '1': Input should be a valid integer``)."""
    try:
        if isinstance(schema, TypeAdapter):
            schema.validate_python(data)
        else:
            schema.model_validate(data)
        return None
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
    first = errors[0]
    where = root + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"])
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    if first["type"] == "missing":
        return f"{where} is missing{more}"
    if first["type"] == "extra_forbidden":
        return f"unknown key {where}{more}"
    return f"{where} = {quoted(first['input'], 80)}: {first['msg']}{more}"


class SidecarWire(WireRecord):
    """A sidecar file's JSON: ``{"fingerprint": "<64 hex>", "payload": <payload>}``."""

    fingerprint: Sha256
    payload: PayloadWire
