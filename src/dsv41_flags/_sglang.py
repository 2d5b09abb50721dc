"""The engine adapter room: everything dsv41_flags knows about sglang, declared once.

Two parts: the engine's contributions to the launch fingerprint (below), and its processes and
plugin loader (roles and ranks read from frames, which spawned processes the plugin activates).

Core modules do not name the engine; they take its facts from here. This part holds what the
engine contributes to the launch fingerprint (``FINGERPRINT``), read from sglang 0.5.23's source:

- **Prefixes the engine reads**: ``SGLANG_`` (every ``Envs`` field of ``sglang/srt/environ.py``),
  the legacy ``SGL_`` spelling (aliased, below) and ``NCCL_`` (read by NCCL under
  torch.distributed; sglang sets several of them itself in ``entrypoints/engine.py``
  ``_set_envs_and_config``).
- **Aliasing** (``canonical_env``): ``environ.py`` ``_handle_deprecated_envs`` copies every
  ``SGL_<X>`` to ``SGLANG_<X>`` at import, overwriting a ``SGLANG_<X>`` already set, so the
  legacy spelling wins when both are set; the ``Env*WithAlias`` fields read their deprecated name
  only when the canonical one is unset, so there the canonical name wins. The fingerprint hashes
  the value the engine will read, under the canonical name: ``SGL_X=1`` and ``SGLANG_X=1`` give
  the same fingerprint, ``SGL_X=0`` and ``SGL_X=1`` differ.
- **Volatile variables**: ``SGLANG_RUN_ID`` (written fresh by ``_set_envs_and_config`` on every
  launch), and the variables that differ between the nodes or processes of one launch, or from
  restart to restart, without changing a kernel (ports, addresses, ranks).
- **Volatile launch options** (``server_args`` fields, ``arg_groups/fields/*.py``): the HTTP
  ``--host`` / ``--port``, the rendezvous (``--dist-init-addr`` alias ``--nccl-init-addr``,
  ``--nccl-port``, ``--node-rank``), and the other ports and addresses of one node (gRPC, sidecar,
  bootstrap servers, gated launch, remote weight loader). ``--nnodes`` and every size stay in: the
  nodes of one launch agree on them.

- **Option spellings** (``canonical_argv``): for sglang's launchers, aliases and unique
  abbreviations become the canonical option, as sglang's argparse parser reads them (``--tp 16``
  is ``--tp-size 16``); the option table is read from the installed source (``server_options``).

An operator's ``[default.fingerprint]`` table adds to these; it never has to repeat them.
"""
from __future__ import annotations

import functools
import importlib.metadata
import os
import re
import sys
from typing import Any, Callable, Mapping

from ._fingerprint import EngineFacts

ENGINE = "sglang 0.5.23"
_ENV_SRC = "sglang/srt/environ.py"
_ARGS_SRC = "sglang server_args (arg_groups/fields)"

#: prefix -> why the engine reads it
ENV_PREFIXES: dict[str, str] = {
    "SGLANG_": f"{_ENV_SRC}: every engine variable",
    "SGL_": f"{_ENV_SRC} _handle_deprecated_envs: legacy spelling, copied to SGLANG_<X>",
    "NCCL_": "read by NCCL (torch.distributed); sglang sets some itself (_set_envs_and_config)",
}

#: variable -> why it never changes a tuned kernel
VOLATILE_ENV: dict[str, str] = {
    "SGLANG_RUN_ID": "rewritten with a fresh value on every launch (entrypoints/engine.py "
                     "_set_envs_and_config)",
    "SGLANG_DP_RANK": "differs between the processes of one launch (data-parallel rank)",
    "SGLANG_IS_FIRST_RANK_ON_NODE": "differs between the nodes of one launch",
    "SGLANG_ZMQ_SOURCE_IP": "address of this node (IPC connects)",
    "SGLANG_PORT": "base port for ephemeral sockets",
    "SGLANG_BACKUP_PORT_BASE": "base port for ephemeral sockets",
    "SGLANG_TCP_STORE_PORT": "rendezvous port",
    "SGLANG_GRPC_PORT": "port of the gRPC server",
    "SGLANG_ZBAL_BOOTSTRAP_URL": "rendezvous address",
    # NCCL names this node's network devices and host: they may differ between the nodes of one
    # launch (NIC names, HCA lists) without changing a tuned kernel
    "NCCL_SOCKET_IFNAME": "network interface of this node (NCCL)",
    "NCCL_IB_HCA": "InfiniBand adapters of this node (NCCL)",
    "NCCL_HOSTID": "host identity of this node (NCCL)",
    "NCCL_DEBUG_FILE": "log file of this node (NCCL)",
}

#: launch option -> why it never changes a tuned kernel (aliases listed as their own entries)
VOLATILE_ARGV: dict[str, str] = {
    "--host": "HTTP server address",
    "--port": "HTTP server port",
    "--node-rank": "differs between the nodes of one launch",
    "--dist-init-addr": "rendezvous address (differs from restart to restart)",
    "--nccl-init-addr": "rendezvous address (alias of --dist-init-addr)",
    "--nccl-port": "rendezvous port (random by default)",
    "--gated-launch-port": "port of the gated launch server",
    "--grpc-port": "port of the gRPC server",
    "--smg-http-sidecar-port": "port of the HTTP sidecar",
    "--grpc-http-sidecar-port": "port of the HTTP sidecar (alias)",
    "--disaggregation-bootstrap-port": "port of the bootstrap server",
    "--encoder-bootstrap-port": "port of the encoder bootstrap server",
    "--engine-info-bootstrap-port": "port of the engine info bootstrap server",
    "--encoder-urls": "addresses of encoder servers",
    "--encoder-register-urls": "addresses of encoder bootstrap servers",
    "--remote-instance-weight-loader-seed-instance-ip": "address of the weight seed instance",
    "--remote-instance-weight-loader-seed-instance-service-port": "port of the weight seed instance",
    "--remote-instance-weight-loader-send-weights-group-ports": "ports of the weight transfer group",
    "--forward-pass-metrics-ipc-name": "IPC socket name",
}

#: deprecated name -> canonical name, read only when the canonical one is unset
#: (``Env*WithAlias(deprecated_name=...)`` fields of environ.py)
FIELD_ALIASES: dict[str, str] = {
    "SGLANG_OPT_SWA_RELEASE_LEAF_LOCK_AFTER_WINDOW": "SGLANG_OPT_RELEASE_PREFILL_SWA",
    "SGLANG_AITER_MLA_DCP_DECODE_BACKEND": "SGLANG_AITER_MLA_DECODE_BACKEND",
    "SGLANG_EPLB_ROCM_P2P_BATCH_CHUNK_SIZE": "SGLANG_EPLB_P2P_BATCH_CHUNK_SIZE",
    "SGLANG_USE_TRITON_ROUTER_SUM": "SGLANG_USE_CUSTOM_ROUTER_SUM",
}


def canonical_env(environ: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """The variables as the engine will read them, under their canonical names.

    Returns ``(env, notes)``: ``env`` is ``environ`` with every ``SGL_<X>`` renamed ``SGLANG_<X>``
    (its value wins over a ``SGLANG_<X>`` also set, as ``_handle_deprecated_envs`` overwrites it)
    and every deprecated field alias renamed to its field (the canonical value wins when both are
    set); ``notes`` maps each renamed or overridden name to a sentence saying what happened.
    Pure function; ``environ`` is not modified.
    """
    env = dict(environ)
    notes: dict[str, str] = {}
    for name in sorted(environ):
        if name.startswith("SGL_"):
            canon = "SGLANG_" + name[len("SGL_"):]
            if canon in environ and environ[canon] != environ[name]:
                notes[canon] = (f"set to {environ[canon]!r} but overridden by {name}={environ[name]!r} "
                                f"(the engine copies SGL_<X> over SGLANG_<X>: {_ENV_SRC} "
                                f"_handle_deprecated_envs)")
            env[canon] = environ[name]
            del env[name]
            notes[name] = f"legacy spelling: enters as {canon} ({_ENV_SRC} _handle_deprecated_envs)"
    for old, canon in FIELD_ALIASES.items():
        if old in env:
            value = env.pop(old)
            if canon in env:
                notes[old] = f"deprecated alias of {canon}, which is set and wins ({_ENV_SRC})"
            else:
                env[canon] = value
                notes[old] = f"deprecated alias: enters as {canon} ({_ENV_SRC})"
    return env, notes




# --------------------------------------------------------------------- launch options
#: programs whose options are sglang's server arguments, as ``normalize_argv`` spells them
#: (``python -m sglang.launch_server`` / ``.../sglang/launch_server.py``; ``sglang serve``)
LAUNCHERS = {"sglang.launch_server": 1, "sglang": 2}


def _source_root():
    """sglang's package directory, found without importing it (None when not installed)."""
    import importlib.util
    from pathlib import Path

    try:
        spec = importlib.util.find_spec("sglang")
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or ()) if spec else []
    return Path(locations[0]) if locations else None


_FIELD = re.compile(r"^    ([a-z_][a-z0-9_]*): A\[", re.M)
_FIELD_END = re.compile(r"^\S|^    (?:def |@|[A-Za-z_][A-Za-z0-9_]* = )", re.M)
_OPTION = re.compile(r"""["'](--[^"']+)["']""")
_ADD_ARGUMENT = re.compile(r"add_argument\(\s*((?:[\"']--[^\"']+[\"']\s*,\s*)+)")


def _option_files(root):
    return sorted((root / "srt" / "arg_groups" / "fields").glob("*.py")), root / "srt" / "server_args.py"


@functools.lru_cache(maxsize=1)
def server_options() -> dict[str, str]:
    """Every option string of sglang's server arguments -> its canonical spelling (the first
    name argparse registers: ``--tensor-parallel-size`` -> ``--tp-size``; ``--no-<x>`` of a
    ``BooleanOptionalAction`` keeps its own), read from the installed source without importing
    it (about 8 ms): the ``A[T, ...]`` fields of ``srt/arg_groups/fields/*.py`` (``--field-name``,
    ``Arg(cli_name=, aliases=, no_cli=)``, as ``arg_utils.add_cli_args_from_dataclass`` registers
    them) and the ``add_argument`` calls of ``srt/server_args.py``. A text scan, checked equal to
    the ``ast`` reading (``_server_options_ast``) and to the live parser by the tests. Empty when
    sglang is not installed or its source cannot be read."""
    root = _source_root()
    out: dict[str, str] = {}
    if root is None:
        return out

    def register(names: list[str]) -> None:
        for name in names:
            out.setdefault(name, names[0])

    fields, server_args = _option_files(root)
    for path in fields:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        starts = list(_FIELD.finditer(text))
        for i, m in enumerate(starts):
            seg = text[m.end():starts[i + 1].start() if i + 1 < len(starts) else len(text)]
            nl = seg.find("\n")
            stop = _FIELD_END.search(seg, nl + 1) if nl >= 0 else None
            seg = seg[:stop.start()] if stop else seg  # the annotation, not what follows it
            name, aliases = "--" + m.group(1).replace("_", "-"), []
            if "Arg(" in seg:
                if re.search(r"no_cli\s*=\s*True", seg):
                    continue
                cli = re.search(r"cli_name\s*=\s*[\"'](--[^\"']+)[\"']", seg)
                name = cli.group(1) if cli else name
                listed = re.search(r"aliases\s*=\s*\[([^\]]*)\]", seg)
                aliases = _OPTION.findall(listed.group(1)) if listed else []
            elif '"' not in seg and "'" not in seg:
                continue  # A[T] without help: not a command-line field
            register([name] + aliases)
            if "BooleanOptionalAction" in seg:
                for n in [name] + aliases:  # --no-<name>: its own meaning, its own spelling
                    out.setdefault("--no-" + n[2:], "--no-" + name[2:])
    try:
        text = server_args.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        text = ""
    for m in _ADD_ARGUMENT.finditer(text):
        register(_OPTION.findall(m.group(1)))
    return out


def _server_options_ast() -> dict[str, str]:
    """``server_options`` read with ``ast`` (slower, about 50 ms): the reference the text scan is
    checked against in the tests."""
    import ast

    root = _source_root()
    out: dict[str, str] = {}
    if root is None:
        return out

    def register(names: list[str]) -> None:
        names = [n for n in names if isinstance(n, str) and n.startswith("--")]
        for name in names:
            out.setdefault(name, names[0])

    fields, server_args = _option_files(root)
    for path in fields + [server_args]:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if path == server_args:
                if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
                    register([a.value for a in node.args if isinstance(a, ast.Constant)])
                continue
            if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and isinstance(node.annotation, ast.Subscript)
                    and getattr(node.annotation.value, "id", "") == "A"):
                continue
            parts = node.annotation.slice.elts if isinstance(node.annotation.slice, ast.Tuple) else []
            arg = next((p for p in parts[1:] if isinstance(p, ast.Call)
                        and getattr(p.func, "id", "") == "Arg"), None)
            if arg is None and not any(isinstance(p, ast.Constant) and isinstance(p.value, str)
                                       for p in parts[1:]):
                continue
            kw = {k.arg: k.value for k in (arg.keywords if arg is not None else [])}
            if isinstance(kw.get("no_cli"), ast.Constant) and kw["no_cli"].value is True:
                continue
            cli = kw.get("cli_name")
            name = cli.value if isinstance(cli, ast.Constant) else "--" + node.target.id.replace("_", "-")
            aliases = [e.value for e in getattr(kw.get("aliases"), "elts", []) if isinstance(e, ast.Constant)]
            register([name] + aliases)
            if getattr(kw.get("action"), "attr", "") == "BooleanOptionalAction":
                for n in [name] + aliases:
                    out.setdefault("--no-" + n[2:], "--no-" + name[2:])
    return out


def canonical_argv(argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """sglang's own spelling of a launch command (``normalize_argv`` form), as its argparse parser
    reads it: an alias becomes the canonical option (``--tensor-parallel-size`` -> ``--tp-size``)
    and an abbreviation that is the unique prefix of one option is expanded (``--tp`` ->
    ``--tp-size``, argparse's ``allow_abbrev``; ``prepare_server_args`` keeps it on). Only for
    sglang's launchers (``LAUNCHERS``); other commands are returned unchanged. Returns ``(argv,
    notes)``, notes mapping each respelled option to a sentence."""
    skip = LAUNCHERS.get(argv[0]) if argv else None
    if skip is None or (argv[0] == "sglang" and (len(argv) < 2 or argv[1] != "serve")):
        return list(argv), {}
    options = server_options()
    if not options:
        return list(argv), {}
    out, notes = list(argv[:skip]), {}
    for token in argv[skip:]:
        if token.startswith("--") and len(token) > 2:
            canon = options.get(token)
            if canon is None:
                matches = {options[o] for o in options if o.startswith(token)}
                canon = matches.pop() if len(matches) == 1 else None
                how = "abbreviation"
            else:
                how = "alias"
            if canon is not None and canon != token:
                notes[token] = f"{how} of {canon} (sglang server_args): enters as {canon}"
                token = canon
        out.append(token)
    return out, notes


FINGERPRINT = EngineFacts(
    engine=ENGINE,
    prefixes=ENV_PREFIXES,
    volatile={**VOLATILE_ENV, **VOLATILE_ARGV},
    canonical_env=canonical_env,
    canonical_argv=canonical_argv,
)


# ------------------------------------------------------------------------ processes and plugin
# The process roles sglang starts, how to read a process's role and ranks from the
# ``run_<role>_process(...)`` frame that calls ``load_plugins()``, and whether sglang's plugin
# loader will activate a spawned process (so the ``dsv41-flags run`` bootstrap leaves it to the
# plugin, which knows role and ranks before the first event).
#: the ``entry`` field of a ``flags.error`` raised under sglang's plugin loader
PLUGIN_ENTRY_NAME = "sglang-plugin"
#: roles whose processes never initialise the model-parallel world (no rank guard there)
NO_GUARD_ROLES = ("engine", "detokenizer", "data_parallel_controller")
#: entry-point group of sglang's general plugins (``sglang.srt.plugins.load_plugins``)
PLUGIN_GROUP = "sglang.srt.plugins"
#: our entry in that group (pyproject ``[project.entry-points."sglang.srt.plugins"]``)
PLUGIN_ENTRY = ("dsv41_flags", "dsv41_flags._plugin:load")
#: rank arguments of sglang's process entry functions, in report order
RANKS = ("tp_rank", "pp_rank", "dp_rank", "moe_ep_rank")
#: process entry functions of sglang 0.5.23 that call ``load_plugins()`` first thing
#: (scheduler.py, detokenizer_manager.py, data_parallel_controller.py) -> role
PROCESS_ENTRIES = {
    "run_scheduler_process": "scheduler",
    "run_detokenizer_process": "detokenizer",
    "run_data_parallel_controller_process": "data_parallel_controller",
}
#: spawn targets that reach one of PROCESS_ENTRIES before anything else (data_parallel_controller.py)
DEFERRING_TARGETS = frozenset(PROCESS_ENTRIES) | {"run_scheduler_process_with_init_pipe"}


def caller_context(max_depth: int = 16, frame=None) -> dict[str, Any]:
    """Role and ranks of the sglang process calling ``load_plugins()``, read from the calling
    ``run_<role>_process(..., tp_rank, pp_rank, dp_rank, ...)`` frame: e.g.
    ``{"role": "scheduler", "tp_rank": 0, "pp_rank": 0}`` (None ranks left out); ``{"role":
    "engine"}`` under ``Engine.__init__``; ``{}`` when unknown. Read before activating, so the
    first event (``flags.resolved``) already carries them."""
    frame = frame or sys._getframe(1)
    for _ in range(max_depth):
        if frame is None:
            break
        name = frame.f_code.co_name
        if name.startswith("run_") and name.endswith("_process"):
            ctx: dict[str, Any] = {"role": PROCESS_ENTRIES.get(name, name[len("run_"):-len("_process")])}
            ctx.update({k: frame.f_locals[k] for k in RANKS
                        if isinstance(frame.f_locals.get(k), int)})
            return ctx
        if name == "__init__" and type(frame.f_locals.get("self")).__name__ == "Engine":
            return {"role": "engine"}
        frame = frame.f_back
    return {}


def plugin_installed(environ=None) -> bool:
    """True when our entry point is in sglang's plugin group and ``SGLANG_PLUGINS`` (sglang's
    whitelist, comma-separated names) does not leave it out."""
    environ = os.environ if environ is None else environ
    try:
        eps = importlib.metadata.entry_points(group=PLUGIN_GROUP)
    except Exception:
        return False
    if not any((ep.name, ep.value) == PLUGIN_ENTRY for ep in eps):
        return False
    allowed = environ.get("SGLANG_PLUGINS", "").strip()
    return not allowed or PLUGIN_ENTRY[0] in {x.strip() for x in allowed.split(",")}


def plugin_will_activate(target: Callable | None, environ=None) -> bool:
    """True when ``target`` (the function a spawned process is about to run) is one of sglang's
    process entries, which call ``load_plugins()`` first, and our plugin is installed: that
    process then activates through the plugin with its role and ranks."""
    if target is None:
        return False
    module = getattr(target, "__module__", "") or ""
    return (module.startswith("sglang.") and getattr(target, "__name__", "") in DEFERRING_TARGETS
            and plugin_installed(environ))
