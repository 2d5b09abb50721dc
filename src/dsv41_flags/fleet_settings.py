"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

The fleet settings: which flag service drives the live features of a server (docs/fleet.md).

Written as the ``fleet`` table of a profile (``[default.fleet]``, or ``[<profile>.fleet]`` to
point one profile at another environment: a top-level ``[fleet]`` would be a profile) and as
``DSV41_FLEET_<FIELD>`` variables (``DSV41_FLEET_PROVIDER=flagd``), which win over the files.
Each field has a declared type (``FleetSettings``) and a source, like every other setting. The
flag service's token is a secret: only ``DSV41_FLEET_TOKEN`` or a file named by ``token_file``
hold it; a ``token`` in a settings file is refused, and it is never put in the snapshot, an event
or any output.

Without a ``fleet`` table and without a ``DSV41_FLEET_*`` variable nothing of the fleet is
loaded: no OpenFeature import, no thread (``FleetSettings`` is then never built).
"""
from __future__ import annotations

from typing import Any, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from dsv41_flags.names import ENV_PREFIX
from dsv41_flags.values import CastError, Kind, cast

#: the table's name in a profile, and the variables' prefix (``DSV41_FLEET_<FIELD>``)
TABLE = "FLEET"
VARIABLE_PREFIX = f"{ENV_PREFIX}{TABLE}_"
#: the variable that holds the flag service's token (a secret: never kept, never shown)
TOKEN_VAR = f"{VARIABLE_PREFIX}TOKEN"
PROVIDERS = ("unleash", "flagd")


class FleetSettings(BaseModel):
    """The typed fleet table. Every field below; anything else is refused.

    - ``provider``: ``unleash`` (an Unleash server's client API at ``url``) or ``flagd`` (a
      flagd flag definition file at ``path``, watched for changes: flagd's file mode);
    - ``prefix``: a feature ``F`` is the flag ``<prefix>F`` (default ``dsv41.``);
    - ``url``, ``app_name``, ``environment``, ``token_file``: Unleash's client API URL (ending in
      ``/api``), the application name the server registers under, the Unleash environment its
      token is for (shown in provenance and sent in the context), a file holding the token;
    - ``path``: the flagd file (JSON or YAML);
    - ``poll_interval_s`` (seconds, 0.1 to 3600): how often the provider refreshes;
    - ``boot_timeout_s`` (seconds, 0 to 120): the longest a launch waits for the first answer;
    - ``required``: a launch whose flag service does not answer stops (in strict mode);
    - ``min_switch_interval_s`` (seconds, 0 to 3600): a flag's changes closer than this are
      coalesced into one switch (the ranks never see a higher switch rate);
    - ``instance_id``: the server's targeting key (default ``<host>:<port>`` of the launch,
      stable across restarts);
    - ``labels``: text -> text, sent in the evaluation context (``cluster = "canary"``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    provider: Literal["unleash", "flagd"]
    prefix: str = Field("dsv41.", min_length=1, max_length=64)
    url: str = Field("", max_length=2048)
    app_name: str = Field("dsv41-flags", min_length=1, max_length=128)
    environment: str = Field("", max_length=128)
    token_file: str = Field("", max_length=4096)
    path: str = Field("", max_length=4096)
    poll_interval_s: float = Field(5.0, ge=0.1, le=3600)
    boot_timeout_s: float = Field(5.0, ge=0, le=120)
    required: bool = False
    min_switch_interval_s: float = Field(1.0, ge=0, le=3600)
    instance_id: str = Field("", max_length=256)
    labels: dict[str, str] = Field(default_factory=dict, max_length=64)

    @field_validator("labels")
    @classmethod
    def _labels(cls, labels: dict[str, str]) -> dict[str, str]:
        for key, value in labels.items():
            if not key or len(key) > 64 or len(value) > 256:
                raise ValueError(f"label {key[:64]!r}: names are 1 to 64 characters, values at "
                                 f"most 256")
        return labels

    def flag(self, feature: str) -> str:
        """The flag that drives ``feature``: ``<prefix><feature>``."""
        return f"{self.prefix}{feature}"

    def where(self) -> str:
        """The flag service in words, without a secret: ``unleash http://host/api (environment
        production)`` or ``flagd file /etc/flags.json``."""
        if self.provider == "flagd":
            return f"flagd file {self.path}"
        from dsv41_flags.secrecy import masked_url

        env = f", environment {self.environment}" if self.environment else ""
        return f"unleash {masked_url(self.url)}{env}"


#: field -> the kind its variable's text is cast by (``labels``: ``k=v,k=v``)
FIELD_KINDS: dict[str, Kind] = {
    "provider": Kind.CHOICE, "prefix": Kind.STR, "url": Kind.STR, "app_name": Kind.STR,
    "environment": Kind.STR, "token_file": Kind.STR, "path": Kind.STR,
    "poll_interval_s": Kind.FLOAT, "boot_timeout_s": Kind.FLOAT, "required": Kind.BOOL,
    "min_switch_interval_s": Kind.FLOAT, "instance_id": Kind.STR, "labels": Kind.STR,
}
assert set(FIELD_KINDS) == set(FleetSettings.model_fields)
#: every ``DSV41_FLEET_*`` variable that is read (the token's included)
VARIABLES: tuple[str, ...] = tuple(VARIABLE_PREFIX + f.upper() for f in FIELD_KINDS) + (TOKEN_VAR,)


def variable_value(field: str, text: str) -> Any:
    """The value of ``DSV41_FLEET_<FIELD>``'s ``text`` for ``field``. Raises CastError (what is
    accepted) for text its kind refuses; ``labels`` is ``name=value`` pairs joined by ``,``."""
    kind = FIELD_KINDS[field]
    if field == "labels":
        pairs = [p.strip() for p in text.split(",") if p.strip()]
        if not all("=" in p and p.split("=", 1)[0].strip() for p in pairs):
            raise CastError("name=value pairs joined by commas (cluster=canary,region=eu)")
        return {k.strip(): v.strip() for k, v in (p.split("=", 1) for p in pairs)}
    if kind == Kind.CHOICE:
        return cast(kind, text.strip().lower(), choices=PROVIDERS)
    return cast(kind, text)


def problem_text(exc: ValidationError) -> list[tuple[str, str]]:
    """``[(field, "got X; accepted: ...")]`` for each problem pydantic found in a fleet table."""
    out = []
    for error in exc.errors(include_url=False):
        field = ".".join(str(p) for p in error.get("loc", ())) or "fleet"
        out.append((field, error.get("msg", "invalid")))
    return out


def from_wire(data: Mapping[str, Any]) -> FleetSettings:
    """The fleet settings of a snapshot (``model_dump`` form). Raises ValidationError."""
    return FleetSettings.model_validate(dict(data))
