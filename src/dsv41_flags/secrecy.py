"""Secrecy: which names mark a secret, and how a secret's value is shown.

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
from dsv41_flags.text import quoted

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
