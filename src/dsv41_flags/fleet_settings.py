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
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from dsv41_flags.names import FLEET_VARIABLE_PREFIX
from dsv41_flags.values import CastError, Kind, cast

#: the table's name in a profile, and the variables' prefix (``DSV41_FLEET_<FIELD>``)
TABLE = "FLEET"
VARIABLE_PREFIX = FLEET_VARIABLE_PREFIX
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

    provider: Literal["unleash", "flagd"] = Field(description="unleash or flagd")
    prefix: str = Field("dsv41.", min_length=1, max_length=64,
                        description="printable ASCII text of 1 to 64 characters (dsv41.)")
    url: str = Field("", max_length=2048, description=(
        "the Unleash client API URL, http(s)://HOST[:PORT]/.../api (http://HOST:4242/api), with no credentials, query "
        "or fragment (the token goes in DSV41_FLEET_TOKEN or fleet.token_file)"))
    app_name: str = Field("dsv41-flags", min_length=1, max_length=128,
                          description="printable ASCII text of 1 to 128 characters")
    environment: str = Field("", max_length=128,
                             description="printable ASCII text of at most 128 characters")
    token_file: str = Field("", max_length=4096, description="a path to a regular file")
    path: str = Field("", max_length=4096, description="a path to a flagd flag definition file (JSON or YAML)")
    poll_interval_s: float = Field(5.0, ge=0.1, le=3600,
                                   description="a number of seconds from 0.1 to 3600")
    boot_timeout_s: float = Field(5.0, ge=0, le=120,
                                  description="a number of seconds from 0 to 120")
    required: bool = Field(False, description="true or false")
    min_switch_interval_s: float = Field(1.0, ge=0, le=3600,
                                         description="a number of seconds from 0 to 3600")
    instance_id: str = Field("", max_length=256,
                             description="printable ASCII text of at most 256 characters")
    labels: dict[str, str] = Field(default_factory=dict, max_length=64, description=(
        "a table of at most 64 text values, names of 1 to 64 characters, values of at most "
        "256 (labels = { cluster = \"canary\" })"))

    @field_validator("labels")
    @classmethod
    def _labels(cls, labels: dict[str, str]) -> dict[str, str]:
        for key, value in labels.items():
            if not key or len(key) > 64 or len(value) > 256:
                raise ValueError(f"label {key[:64]!r}: names are 1 to 64 characters, values at "
                                 f"most 256")
        return labels

    @field_validator("app_name", "environment", "instance_id", "prefix")
    @classmethod
    def _header_text(cls, text: str) -> str:
        # sent in HTTP headers (UNLEASH-APPNAME, UNLEASH-INSTANCEID) and flag names: one line
        # of printable ASCII, or the request fails at boot and blames the flag service
        if not all(" " <= c <= "~" for c in text):
            raise ValueError("it holds a control or a non-ASCII character (it is sent in HTTP "
                             "headers)")
        return text

    @field_validator("path", "token_file")
    @classmethod
    def _path(cls, path: str) -> str:
        if "\x00" in path or not path.isprintable():
            raise ValueError("it holds a NUL or a control character")
        return path

    @field_validator("url")
    @classmethod
    def _url(cls, url: str) -> str:
        if not url:
            return url
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 - raises ValueError for a port that is not a number
        except ValueError:
            raise ValueError("it is not a URL") from None
        if not url.isprintable() or any(c.isspace() for c in url):
            raise ValueError("it holds a space, a NUL or a control character")
        if parts.port == 0:
            raise ValueError("its port is 0 (accepted: 1 to 65535)")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("it is not an http:// or https:// URL with a host")
        if "@" in parts.netloc:
            raise ValueError("credentials in the URL are refused (a secret)")
        if parts.query or parts.fragment or "?" in url or "#" in url:
            raise ValueError("a query or fragment is refused (a token belongs in "
                             "DSV41_FLEET_TOKEN or fleet.token_file)")
        if not parts.path.rstrip("/").endswith("/api"):
            raise ValueError("its path does not end in /api (Unleash's client API)")
        return url

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


def accepted(field: str) -> str:
    """What ``fleet.<field>`` accepts, in words (its ``Field`` description); ``field`` may be a
    dotted location (``labels.cluster``)."""
    info = FleetSettings.model_fields.get(field.split(".")[0])
    return info.description if info is not None and info.description else "a fleet setting"


def problem_text(exc: ValidationError) -> list[tuple[str, str]]:
    """``[(field, why)]`` for each problem pydantic found in a fleet table: ``why`` is the
    reason a validator of ``FleetSettings`` gave (``"it is not a URL"``), or ``""`` when the
    value is only out of the field's type or bounds (``accepted`` then says it all)."""
    out = []
    for error in exc.errors(include_url=False):
        field = ".".join(str(p) for p in error.get("loc", ())) or "fleet"
        why = ""
        if error.get("type") == "value_error":
            ctx = error.get("ctx") or {}
            why = str(ctx.get("error") or error.get("msg", ""))
        elif error.get("type") == "extra_forbidden":
            why = "it is not a fleet setting"
        elif error.get("type") == "missing":
            why = "it is not set"
        out.append((field, why))
    return out


def from_wire(data: Mapping[str, Any]) -> FleetSettings:
    """The fleet settings of a snapshot (``model_dump`` form). Raises ValidationError."""
    return FleetSettings.model_validate(dict(data))
