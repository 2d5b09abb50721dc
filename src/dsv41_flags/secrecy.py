"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

Secrecy: which names mark a secret, and how a secret's value is shown.

A name (a variable, a launch option, a flag or option key) marks a secret when the parts of one
of the secret names appear in it in order and side by side, parts being split at ``-``, ``_``,
``.`` and spaces, case ignored: ``password`` marks ``--ssl-keyfile-password``; ``api-key`` marks
``--api-key``, ``--admin-api-key``, ``WANDB_API_KEY`` and ``--api-key-file``; ``hf-token`` marks
``SGLANG_HF_TOKEN``. A bare ``key`` or ``token`` marks nothing: in an inference engine they name
kernel settings (``--kv-cache-dtype``, ``SGLANG_USE_AITER_FP8_PER_TOKEN``,
``--max-total-tokens``), which must stay in the fingerprint. The secret names add up from
``CORE_SECRETS``, the engine adapter's (``EngineFacts.secrets``) and the settings' own
(``secret_names`` in a settings file, ``DSV41_SECRET_NAMES``).

A secret never enters the fingerprint, the sidecar, the snapshot, an event, ``explain``,
``status`` or an error; where a value must be shown it is ``MASK``. Every stage from the
settings on reads the rule here.
"""
from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, Sequence

from dsv41_flags.engine import EngineFacts, engine_facts
from dsv41_flags.text import exception_text, quoted

#: secret name (parts joined by ``-``) -> why, whatever the engine (see the module docstring)
CORE_SECRETS: dict[str, str] = {
    "password": "a password", "passwd": "a password", "passphrase": "a passphrase",
    "secret": "a secret", "secrets": "secrets", "credential": "a credential",
    "credentials": "credentials", "apikey": "an API key", "api-key": "an API key",
    "api-token": "an API token",
    "access-key": "an access key", "private-key": "a private key",
    "auth-token": "an access token", "access-token": "an access token",
    "bearer-token": "an access token", "session-token": "an access token",
    "refresh-token": "an access token", "id-token": "an identity token",
    # the framework's own key for set / status --url
    "dsv41-api-key": "the CLI's key for the live routes (DSV41_API_KEY)",
    "fleet-token": "the flag service's token (DSV41_FLEET_TOKEN)",
}
#: the framework's setting that lists secret names (parts): names, not secrets
LISTS_OF_SECRET_NAMES = {("secret", "names"), ("dsv41", "secret", "names")}
#: what a secret's value is shown as, where one must be shown
MASK = "***"
_PARTS = re.compile(r"[-_.\s]+")


def name_parts(name: str) -> tuple[str, ...]:
    """``name`` lower-cased and split at ``-``, ``_``, ``.`` and spaces, empty parts dropped:
    ``--ssl-keyfile-password`` -> ``("ssl", "keyfile", "password")``."""
    return tuple(p for p in _PARTS.split(str(name).lower()) if p)


def secret_names(resolution: Any = None, facts: EngineFacts | None = None, *,
                 extra: Iterable[str] = ()) -> dict[str, str]:
    """Every secret name -> who declared it: ``CORE_SECRETS``, the engine adapter's
    (``EngineFacts.secrets``), the settings' ``SECRET_NAMES`` (of ``resolution``, a
    ``Resolution``, when given) and ``extra`` (names read before a resolution exists)."""
    facts = engine_facts() if facts is None else facts
    out = {name: f"dsv41_flags: {why}" for name, why in CORE_SECRETS.items()}
    for name, why in getattr(facts, "secrets", {}).items():
        out.setdefault(name, f"engine default (shipped for {facts.engine}: {why})")
    names = list(getattr(resolution, "reserved", {}).get("SECRET_NAMES", ()) or ()) + list(extra)
    for name in names:
        out.setdefault(str(name), "settings secret_names")
    return out


def is_secret(name: str, secrets: Mapping[str, str] | None = None) -> str:
    """Why ``name`` (a variable, a launch option, a flag or option key) marks a secret: the
    secret name found in it and who declared it (``secrets``, default ``secret_names()``); ``""``
    when it marks none. See the module docstring for the rule. The framework's own setting that
    lists secret names (``SECRET_NAMES``, ``DSV41_SECRET_NAMES``) holds names, not secrets, and is
    shown as set."""
    secrets = secret_names() if secrets is None else secrets
    parts = name_parts(name)
    if parts in LISTS_OF_SECRET_NAMES:
        return ""
    for secret, why in secrets.items():
        wanted = name_parts(secret)
        n = len(wanted)
        if n and any(parts[i:i + n] == wanted for i in range(len(parts) - n + 1)):
            return f"secret: the name holds {'-'.join(wanted)!r} ({why})"
    return ""


def option_is_secret(option: str, secrets: Mapping[str, str] | None = None, *,
                     abbreviation: bool = True) -> str:
    """Why the launch option ``option`` (``--name``, without ``=value``) holds a secret, or "".
    Beyond ``is_secret``, with ``abbreviation`` (a program whose options are not known): an
    argument parser (argparse) accepts any unique prefix of a long option, so ``--admin-api`` or
    ``--api-ke`` may spell ``--admin-api-key``. Such a long option holds a secret too when a tail
    of its parts, the last one possibly cut short, begins a secret name (``--admin-api``: ``api``
    begins ``api-key``; ``--ssl-keyfile-pass``: ``pass`` begins ``password``). It is left out of
    the fingerprint and shown as ``MASK`` even if the program meant another option: a secret is
    never kept. The engine's own launchers need no guess: their options are spelled in full first
    (``EngineFacts.canonical_argv``) and checked with ``abbreviation=False``."""
    secrets = secret_names() if secrets is None else secrets
    why = is_secret(option, secrets)
    if why or not abbreviation or not option.startswith("--"):
        return why
    parts = name_parts(option)
    for i in range(len(parts)):
        tail = "-".join(parts[i:])
        if len(tail) < 2:
            continue
        for secret, who in secrets.items():
            whole = "-".join(name_parts(secret))
            if whole.startswith(tail):
                return f"secret: {option} may abbreviate an option holding {whole!r} ({who})"
    return ""


def shown(name: str, value: Any, secrets: Mapping[str, str] | None = None) -> str:
    """``value`` as an error or a listing may show it: ``text.quoted`` (bounded), or ``MASK``
    when ``name`` (a key, a variable, an option) marks a secret."""
    return MASK if is_secret(name, secrets) else quoted(value)


def mask(name: str, value: Any, secrets: Mapping[str, str] | None = None) -> Any:
    """``value``, or ``MASK`` when ``name`` marks a secret (``is_secret``)."""
    return MASK if is_secret(name, secrets) else value


# ---------------------------------------------------------------------------------------------
# Secrets inside values: a URL's credentials, a secret key's explanation, a changed secret value.

#: a URL as it appears in text: ``scheme://`` then everything up to a space (a quote or a
#: bracket may be part of a password: a closing one is then shown inside the masked part)
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://\S*")
#: a query or fragment parameter: ``name=value``, separated by ``&`` or ``;``
_PARAM = re.compile(r"(?P<name>[^&;=#?]+)=(?P<value>[^&;#]*)")


_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:/+")


#: parts of a URL parameter's name that mark its value a secret in a URL, beyond ``is_secret``:
#: in a URL a bare ``token``, ``key`` or ``sig`` is a credential (``?token=``, ``?key=``, a
#: signed URL's ``X-Amz-Signature``), where in a variable they name kernel settings
URL_SECRET_PARTS = frozenset({"token", "key", "sig", "signature", "auth", "authorization", "code",
                              "jwt", "pass", "pwd", "session", "credential", "ticket"})


def url_parameter_is_secret(name: str, secrets: Mapping[str, str] | None = None) -> bool:
    """Whether the URL parameter ``name`` (a query, fragment or path parameter) holds a secret:
    ``is_secret``, or one of its parts (``name_parts``) is in ``URL_SECRET_PARTS``."""
    return bool(is_secret(name, secrets)) or not URL_SECRET_PARTS.isdisjoint(name_parts(name))


def masked_url(url: str, secrets: Mapping[str, str] | None = None) -> str:
    """``url`` as it may be shown: its credentials (the userinfo ``USER:PASSWORD@``, whole) and
    the value of every path, query or fragment parameter whose name marks a secret in a URL
    (``url_parameter_is_secret``: ``api_key``, ``token``, ``sig``, ``password``...) as ``MASK``. Read from the
    text itself, so a URL that does not parse is masked too, with or without its scheme
    (``u:pw@host:1``, ``http:/u:pw@host``): ``http://u:pw@host:1/;api_key=S?token=T`` ->
    ``http://***@host:1/;api_key=***?token=***``. Anything else is kept as written."""
    text = str(url)
    scheme = _SCHEME.match(text)
    head = scheme.group(0) if scheme else ""
    rest = text[len(head):]
    cut = min((i for i in (rest.find("/"), rest.find("?"), rest.find("#"))
               if i >= 0), default=len(rest))
    authority, tail = rest[:cut], rest[cut:]
    if "@" in authority:
        authority = MASK + authority[authority.rindex("@"):]
    tail = _PARAM.sub(lambda m: f"{m['name']}={MASK}" if url_parameter_is_secret(
        m["name"].lstrip("/"), secrets) else m[0], tail)
    return f"{head}{authority}{tail}"


def masked_text(text: str, secrets: Mapping[str, str] | None = None) -> str:
    """``text`` with every URL in it masked (``masked_url``); text holding no ``://`` is
    returned as it is."""
    if "://" not in text:
        return text
    return _URL_IN_TEXT.sub(lambda m: masked_url(m[0], secrets), text)


def masked_reason(exc: BaseException, limit: int = 300) -> str:
    """``exc`` in words as an event or a problem may show it: ``text.exception_text`` with every
    URL in it masked (``masked_text``: a library's error may quote the URL it fetched, token
    query included), cut to ``limit`` characters."""
    return masked_text(exception_text(exc))[:limit]


def masked_data(data: Any, secrets: Mapping[str, str] | None = None) -> Any:
    """``data`` (JSON-like: dicts, lists, tuples, strings, scalars) with every string, keys
    included, at any depth, passed through ``masked_text``."""
    if isinstance(data, str):
        return masked_text(data, secrets)
    if isinstance(data, dict):
        return {masked_data(k, secrets): masked_data(v, secrets) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [masked_data(v, secrets) for v in data]
    return data


def masked_explanation(explained: dict) -> dict:
    """An explanation of a key whose name marks a secret (``explain``: ``value``, ``chain`` of
    ``[source, raw]``, ``layers`` of dicts with ``raw``) with every value shown as ``MASK``."""
    return {**explained, "value": MASK,
            "chain": [[source, MASK] for source, _ in explained["chain"]],
            "layers": [{**layer, "raw": MASK} for layer in explained["layers"]]}


def masked_changes(changes: Sequence[Mapping[str, Any]], secrets: Mapping[str, str],
                   argv_shown) -> list[dict]:
    """Fingerprint payload changes (dicts with ``part``, ``key``, ``old``, ``new``, as
    ``cache_keeping.diff`` gives them) as they may be shown: a changed launch command through
    ``argv_shown`` (a callable ``list[str] -> list[str]``, ``fingerprint.masked_argv``), a
    value under a name that marks a secret as ``MASK`` (None stays None: absent)."""
    out = []
    for c in changes:
        if c["part"] == "argv":
            c = {**c, **{side: argv_shown(c[side]) if isinstance(c[side], list) else c[side]
                         for side in ("old", "new")}}
        elif is_secret(c["key"], secrets):
            c = {**c, "old": MASK if c["old"] is not None else None,
                 "new": MASK if c["new"] is not None else None}
        out.append(dict(c))
    return out
