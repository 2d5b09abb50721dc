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
  is ``--tp-size 16``), and ``sglang serve`` is the ``sglang.launch_server`` it runs; the option
  table is sglang 0.5.23's, shipped as data (``_data/sglang_options.json``), never read from the
  machine's installed engine (``server_options``).

An operator's ``[default.fingerprint]`` table adds to these; it never has to repeat them.

Live switches over sglang's own control path (issue 12), read from sglang 0.5.23's source:

- ``Engine.collective_rpc(method, **kwargs)`` (entrypoints/engine.py) sends an ``RpcReqInput``
  (managers/io_struct.py: ``method``, ``parameters`` = flat scalars) on a DEALER socket bound to
  ``port_args.rpc_ipc_name``; the entry scheduler rank (``SchedulerIpcChannels.recv_from_rpc``,
  connected to that name) reads it in ``SchedulerRequestReceiver._pull_raw_reqs`` together with
  the tokenizer's requests, ``_broadcast_reqs_across_ranks`` broadcasts them to every TP rank with
  ``broadcast_pyobj`` over the TP CPU group, and every rank's ``Scheduler.handle_rpc_request``
  calls ``getattr(self, method)(**parameters)`` then ``barrier(tp_group.cpu_group)``. So a
  method reached that way runs on every rank at the same point of the input stream, between
  forward steps. Only the entry rank sends the ``RpcReqOutput(success, message)`` back, and
  ``message`` is only filled from an exception.
- The HTTP server (entrypoints/http_server.py ``launch_server``) starts the same subprocesses
  but leaves ``rpc_ipc_name`` unbound (only the offline Engine binds it); the module holds a
  FastAPI ``app`` and passes ``port_args`` to ``_setup_and_run_http_server``.

What this module adds (only when a live feature is declared):

- on ``Scheduler`` (post-import hook on ``sglang.srt.managers.scheduler``): the methods
  ``dsv41_flags_set(name, value, requested_by, request_id)`` and
  ``dsv41_flags_status(request_id)``, and a wrapper of ``handle_rpc_request`` (the framework's
  own patch, through the ledger) that puts our method's JSON answer into the reply's ``message``;
- ``dsv41_flags_set`` is two-phase over the TP CPU group: every rank checks the switch
  (``Runtime.check_switch``) and all-gathers its vote and generation; only when every rank can
  apply and all are on the same generation does each rank apply it (generation + 1, the step =
  ``Scheduler.forward_ct``) and log ``feature.toggled``; otherwise every rank keeps its value and
  logs ``feature.toggle_refused``. A rank whose apply raises makes every rank roll back;
- on the HTTP server's ``app``: ``POST /dsv41_flags/set`` and ``GET /dsv41_flags/status``, which
  send the same ``RpcReqInput`` on sglang's RPC channel (``rpc_ipc_name``, bound by this process
  the way the offline Engine binds it) and wait for the reply in a worker thread;
- ``switch_engine`` / ``engine_status`` for the offline ``Engine`` (its own ``send_to_rpc``), and
  ``http_set`` / ``http_status`` for the CLI (``dsv41-flags set`` / ``status --url``).
"""
from __future__ import annotations

import functools
import importlib.metadata
import json
import os
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Mapping

from dsv41_flags.engines import EngineAdapter, EngineFacts
from dsv41_flags.errors import FlagsError
from dsv41_flags.live import BUILTIN, SwitchError, check_declared, feature_name, process_status

ENGINE = "sglang 0.5.23"
_ENV_SRC = "sglang/srt/environ.py"

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
#: (``python -m sglang.launch_server`` / ``.../sglang/launch_server.py``; ``sglang serve``) ->
#: how many leading words name the program
LAUNCHERS = {"sglang.launch_server": 1, "sglang": 2}
#: ``sglang serve --model-type X`` values that run the same server as ``sglang.launch_server``
#: (``cli/serve.py``: ``auto`` falls back to the LLM backend, whose ``_run_llm`` is
#: ``prepare_server_args(argv)`` + ``launch_server.run_server``)
SERVE_AS_LAUNCH_SERVER = ("auto", "llm")
#: the option table shipped for the supported release (generated by ``write_server_options``)
OPTIONS_FILE = Path(__file__).resolve().parents[2] / "_data" / "sglang_options.json"
_OPTIONS_SRC = "sglang 0.5.23 option table shipped with dsv41_flags (_data/sglang_options.json)"


@functools.lru_cache(maxsize=1)
def _shipped_options() -> tuple[str, dict[str, str]]:
    data = json.loads(OPTIONS_FILE.read_text(encoding="utf-8"))
    return data["release"], dict(data["options"])


def server_options() -> dict[str, str]:
    """Every option string of sglang 0.5.23's server arguments -> its canonical spelling (the
    first name argparse registers: ``--tensor-parallel-size`` -> ``--tp-size``; ``--no-<x>`` of a
    ``BooleanOptionalAction`` keeps its own). The table SHIPPED with this package for the
    supported engine release (``_data/sglang_options.json``, generated from the real parser by
    ``write_server_options``), never read from the machine's installed engine: the launch
    fingerprint is the same wherever it is computed (with and without sglang installed). The
    engine tier checks it equals the installed sglang's parser. Raises OSError / ValueError when
    the shipped file is missing or damaged (a broken install: never a silent empty table)."""
    return _shipped_options()[1]


def server_options_release() -> str:
    """The engine release the shipped option table was generated from (``"sglang 0.5.23"``)."""
    return _shipped_options()[0]


def live_server_options() -> dict[str, str]:
    """``server_options`` as the installed sglang's real parser has it (imports sglang, about
    8 s): ``ServerArgs.add_cli_args`` on an ``argparse`` parser, each ``--`` option string -> the
    first option string of its action (a ``--no-`` string of a ``BooleanOptionalAction`` -> itself).
    Used to generate the shipped table and, in the engine tier, to check it. Raises ImportError
    when sglang is not installed."""
    import argparse

    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    live = {}
    for option, action in parser._option_string_actions.items():
        if not option.startswith("--") or option == "--help":
            continue
        negative = option.startswith("--no-") and isinstance(action, argparse.BooleanOptionalAction)
        live[option] = option if negative else action.option_strings[0]
    return dict(sorted(live.items()))


def write_server_options(path: Path | None = None) -> Path:
    """Regenerate the shipped option table from the installed sglang (after bumping the
    supported release; the engine tier fails until it is done):
    ``python -c "from dsv41_flags.engines.sglang import write_server_options as w; print(w())"``.
    Writes ``{"release", "generated_by", "options"}`` JSON to ``path`` (default ``OPTIONS_FILE``)
    and returns the path. Raises ImportError when sglang is not installed."""
    path = OPTIONS_FILE if path is None else Path(path)
    data = {"release": f"sglang {importlib.metadata.version('sglang')}",
            "generated_by": "dsv41_flags.engines.sglang.write_server_options() from "
                            "ServerArgs.add_cli_args (the real parser)",
            "options": live_server_options()}
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    _shipped_options.cache_clear()
    return path


def _serve_as_launch_server(argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """``sglang serve ARGS`` (``normalize_argv`` form) as the program it runs: with
    ``--model-type`` auto (the default) or llm it is ``sglang.launch_server`` with the same
    server arguments (``cli/serve.py``: ``--model-type`` taken out, a positional model path
    becomes ``--model-path``), so both commands give one fingerprint. Another backend
    (``--model-type diffusion``) stays ``sglang serve``. Other commands are returned unchanged."""
    if len(argv) < 2 or argv[:2] != ["sglang", "serve"]:
        return list(argv), {}
    backend, rest, i = "auto", [], 2
    while i < len(argv):
        if argv[i] == "--model-type" and i + 1 < len(argv):
            backend, i = argv[i + 1], i + 2
            continue
        rest.append(argv[i])
        i += 1
    if backend not in SERVE_AS_LAUNCH_SERVER:
        return list(argv), {}
    if rest and not rest[0].startswith("-"):
        rest = ["--model-path", *rest]
    return (["sglang.launch_server", *rest],
            {"sglang serve": f"runs sglang.launch_server's server (sglang/cli/serve.py, backend "
                             f"{backend!r}): enters as sglang.launch_server"})


def canonical_argv(argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """sglang's own spelling of a launch command (``normalize_argv`` form), as its argparse parser
    reads it: ``sglang serve`` as the ``sglang.launch_server`` it runs (``_serve_as_launch_server``),
    an alias becomes the canonical option (``--tensor-parallel-size`` -> ``--tp-size``) and an
    abbreviation that is the unique prefix of one option is expanded (``--tp`` -> ``--tp-size``,
    argparse's ``allow_abbrev``; ``prepare_server_args`` keeps it on), by the shipped option table
    (``server_options``). Only for sglang's launchers (``LAUNCHERS``); other commands are
    returned unchanged. Returns ``(argv, notes)``, notes mapping each respelled option to a
    sentence."""
    argv, notes = _serve_as_launch_server(list(argv))
    skip = LAUNCHERS.get(argv[0]) if argv else None
    if skip is None or (argv[0] == "sglang" and (len(argv) < 2 or argv[1] != "serve")):
        return list(argv), notes
    options = server_options()
    out = list(argv[:skip])
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
                notes[token] = f"{how} of {canon} ({_OPTIONS_SRC}): enters as {canon}"
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
#: our entry in that group (pyproject ``[project.entry-points."sglang.srt.plugins"]``):
#: ``dsv41_flags_plugin.load``, which imports nothing at module level (a package that cannot load
#: still says so and stops), then calls ``load`` below through the adapter
PLUGIN_ENTRY = ("dsv41_flags", "dsv41_flags_plugin:load")
PLUGIN_ENTRIES = {PLUGIN_ENTRY}
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
    if not any((ep.name, ep.value) in PLUGIN_ENTRIES for ep in eps):
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


# ================================================================== live switches (issue 12)
SCHEDULER_MODULE = "sglang.srt.managers.scheduler"
HTTP_MODULE = "sglang.srt.entrypoints.http_server"
SET_METHOD = "dsv41_flags_set"
STATUS_METHOD = "dsv41_flags_status"
METHODS = (SET_METHOD, STATUS_METHOD)
SET_PATH = "/dsv41_flags/set"
STATUS_PATH = "/dsv41_flags/status"
RPC_TIMEOUT_S = 60.0


# ------------------------------------------------------------------ scheduler side (every rank)
def _runtime():
    from dsv41_flags.activation import current_runtime as runtime

    rt = runtime()
    if rt is None:
        raise SwitchError("dsv41_flags is not active in this scheduler process")
    return rt


def _cpu_group(scheduler):
    group = getattr(scheduler, "tp_group", None)
    return getattr(group, "cpu_group", None)


def _all_gather(obj: Any, group) -> list:
    """``[obj of rank 0, obj of rank 1, ...]`` over ``group`` (``[obj]`` without a group)."""
    import torch.distributed as dist

    if group is None or not dist.is_available() or not dist.is_initialized():
        return [obj]
    size = dist.get_world_size(group)
    if size == 1:
        return [obj]
    out: list = [None] * size
    dist.all_gather_object(out, obj, group=group)
    return out


def _who(rt, group) -> dict:
    """pid, role and ranks of this scheduler (tp_rank from the group when the plugin did not
    read it from sglang's frames)."""
    fields = {k: v for k, v in rt.context.as_fields().items() if k != "process"}
    if "tp_rank" not in fields and group is not None:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            fields["tp_rank"] = dist.get_rank(group)
    return fields


def _rank_label(entry: dict) -> str:
    parts = [f"{k[:-5]}{entry[k]}" for k in ("tp_rank", "pp_rank", "dp_rank") if entry.get(k) is not None]
    return " ".join(parts) or f"pid {entry.get('pid')}"


def scheduler_set(self, name: str, value: Any = None, requested_by: str = "", request_id: str = ""):
    """``Scheduler.dsv41_flags_set``: run by ``handle_rpc_request`` on every TP rank at the same
    point of the input stream. Two phases over the TP CPU group (see the module docstring).
    Answers (through the reply slot) ``{ok, request_id, feature, old, new, generation, ranks}``;
    raises SwitchError when refused (``handle_rpc_request`` reports it as a failed RPC)."""
    rt = _runtime()
    group = _cpu_group(self)
    step = getattr(self, "forward_ct", None)
    who = _who(rt, group)
    name = feature_name(str(name))
    vote: dict = {"ok": True, "generation": rt.live.generation, "step": step, **who}
    try:
        _, new = rt.check_switch(name, value, requested_by)
        vote["old"] = rt.value(rt.features[name])
    except FlagsError as exc:
        vote.update(ok=False, reason=str(exc))
    votes = _all_gather(vote, group)                              # phase 1: can every rank?
    problems = [f"{_rank_label(v)}: {v['reason']}" for v in votes if not v["ok"]]
    generations = sorted({v["generation"] for v in votes})
    if len(generations) > 1:
        problems.append("ranks are on different generations (" + ", ".join(
            f"{_rank_label(v)}: {v['generation']}" for v in votes) + ")")
    base = {"request_id": request_id, "feature": name, "value": value, "requested_by": requested_by}
    if problems:
        message = (f"switch {name}={value!r} refused, every rank keeps its value and generation "
                   f"{rt.live.generation}: " + "; ".join(problems))
        rt.log.error("feature.toggle_refused", feature=name, value=value, requested_by=requested_by,
                     request_id=request_id, step=step, generation=rt.live.generation,
                     reason="; ".join(problems))
        _answer(rt, {"ok": False, **base, "error": message, "ranks": votes})
        raise SwitchError(message)
    toggle = None
    try:                                                          # phase 2: apply
        toggle = rt.switch(name, new, requested_by=requested_by, generation=generations[0] + 1,
                           step=step, request_id=request_id)
        applied = {"ok": True, **toggle.to_dict(), **who}
    except Exception as exc:  # noqa: BLE001 - reported to every rank, which then roll back
        applied = {"ok": False, "reason": f"{type(exc).__name__}: {exc}", "step": step, **who}
    results = _all_gather(applied, group)
    failed = [f"{_rank_label(r)}: {r['reason']}" for r in results if not r["ok"]]
    if failed:
        reason = "a rank could not apply the switch: " + "; ".join(failed)
        if toggle is not None:
            rt.rollback(toggle, reason)
        message = f"switch {name}={value!r} rolled back on every rank: " + reason
        _answer(rt, {"ok": False, **base, "error": message, "ranks": results})
        raise SwitchError(message)
    _answer(rt, {"ok": True, **base, "old": toggle.old, "new": toggle.new,
                 "changed": toggle.changed, "generation": toggle.generation, "step": step, "ranks": results})


def scheduler_status(self, request_id: str = ""):
    """``Scheduler.dsv41_flags_status``: every TP rank all-gathers its ``process_status`` (plus
    ``step`` = ``forward_ct``); answers ``{ok, request_id, ranks: [...]}``."""
    rt = _runtime()
    group = _cpu_group(self)
    me = process_status(rt, step=getattr(self, "forward_ct", None), **_who(rt, group))
    _answer(rt, {"ok": True, "request_id": request_id, "ranks": _all_gather(me, group)})


def _answer(rt, data: dict) -> None:
    rt.live.reply = json.dumps(data, default=str)


def _make_handle_rpc_request(original):
    """The framework's wrapper of ``Scheduler.handle_rpc_request``: runs sglang's own (call +
    barrier), then, for our methods, puts our JSON answer into ``RpcReqOutput.message`` (sglang
    fills it only from an exception). Other RPCs are untouched."""

    def handle_rpc_request(self, recv_req):
        from dsv41_flags.activation import current_runtime as runtime

        rt = runtime()
        ours = rt is not None and getattr(recv_req, "method", None) in METHODS
        if ours:
            rt.live.reply = None
        output = original(self, recv_req)
        if ours and rt.live.reply is not None:
            output.message, rt.live.reply = rt.live.reply, None
        return output

    return handle_rpc_request


def install_scheduler_rpc(rt, module) -> None:
    """Give ``module.Scheduler`` the live-switch RPC methods and the reply wrapper (idempotent;
    the wrapper goes through the ledger, so ``uninstall()`` restores sglang's own)."""
    cls = module.Scheduler
    setattr(cls, SET_METHOD, scheduler_set)
    setattr(cls, STATUS_METHOD, scheduler_status)
    rt.ledger.patch(BUILTIN, cls, "handle_rpc_request", _make_handle_rpc_request)


# ------------------------------------------------------------------ client side
class RpcClient:
    """Sends ``RpcReqInput`` on sglang's RPC channel (a DEALER socket: the offline Engine's
    ``send_to_rpc``, or the one the HTTP server process binds) and returns our method's answer.

    Replies carry the request id: a late reply of an earlier call that timed out is skipped.
    One call at a time (a lock)."""

    def __init__(self, socket):
        self.socket = socket
        self.lock = threading.Lock()

    def call(self, method: str, timeout_s: float = RPC_TIMEOUT_S, **params: Any) -> dict:
        """Send ``method(**params)`` to every scheduler rank; returns the decoded answer
        (``{"ok": bool, ...}``). Raises SwitchError when no answer comes within ``timeout_s``."""
        from sglang.srt.managers.io_struct import RpcReqInput, RpcReqOutput, sock_recv, sock_send

        request_id = uuid.uuid4().hex[:16]
        with self.lock:
            sock_send(self.socket, RpcReqInput(method=method,
                                               parameters={**params, "request_id": request_id}))
            deadline = time.monotonic() + timeout_s
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self.socket.poll(int(remaining * 1000)):
                    raise SwitchError(
                        f"{method}: no answer from the scheduler within {timeout_s:g} s (a rank "
                        f"busy in a long step, or hung?); the request may still be applied: "
                        f"check with dsv41-flags status --url")
                out = sock_recv(self.socket)
                if not isinstance(out, RpcReqOutput):
                    continue
                try:
                    data = json.loads(out.message) if out.message else None
                except ValueError:
                    data = None
                if not isinstance(data, dict):
                    return {"ok": False, "error": (
                        f"the schedulers answered {method} with "
                        f"{'success' if out.success else 'an error'}: {out.message or '(no message)'}"
                        + ("" if out.success else " (is dsv41_flags active in the scheduler "
                           "processes, with a live feature declared?)"))}
                if data.get("request_id") not in (None, request_id):
                    continue  # the late answer of an earlier call
                return data


def switch_engine(engine, name: str, value: Any, *, requested_by: str = "python",
                  timeout_s: float = RPC_TIMEOUT_S) -> dict:
    """Switch live feature ``name`` on every scheduler rank of an offline ``sglang.Engine``
    (node 0), in lockstep. Returns ``{ok, feature, old, new, generation, step, ranks}``.
    Raises SwitchError with the ranks' reasons when refused. Do not call it concurrently with
    ``Engine.collective_rpc`` (one socket)."""
    data = _engine_client(engine).call(SET_METHOD, timeout_s, name=feature_name(name), value=value,
                                       requested_by=requested_by)
    if not data.get("ok"):
        raise SwitchError(data.get("error") or json.dumps(data))
    return data


def engine_status(engine, *, timeout_s: float = RPC_TIMEOUT_S) -> dict:
    """Every scheduler rank's status of an offline ``sglang.Engine``: ``{ok, ranks: [...]}``
    (each rank: the ``status --json`` shape plus pid, role, ranks, generation, step, switches)."""
    return _engine_client(engine).call(STATUS_METHOD, timeout_s)


def _engine_client(engine) -> RpcClient:
    socket = getattr(engine, "send_to_rpc", None)
    if socket is None:
        raise SwitchError("this Engine has no RPC socket (only node 0 of a launch binds it)")
    return RpcClient(socket)


# ------------------------------------------------------------------ HTTP server process
def _capture_port_args(rt):
    def make(original):
        def _setup_and_run_http_server(server_args, tokenizer_manager, template_manager, port_args,
                                       *args, **kwargs):
            rt.live.transport["rpc_endpoint"] = port_args.rpc_ipc_name
            return original(server_args, tokenizer_manager, template_manager, port_args,
                            *args, **kwargs)

        return _setup_and_run_http_server

    return make


def _server_client(rt) -> RpcClient:
    """This HTTP server process's RPC client, bound to ``rpc_ipc_name`` on first use (as the
    offline Engine binds it at start)."""
    client = rt.live.transport.get("client")
    if client is None:
        endpoint = rt.live.transport.get("rpc_endpoint")
        if endpoint is None:
            raise SwitchError("the RPC endpoint of the schedulers is not known in this process "
                              "(the server was not started through sglang's launch_server)")
        import zmq
        from sglang.srt.utils.network import get_zmq_socket

        socket = get_zmq_socket(zmq.Context.instance(), zmq.DEALER, endpoint, True)
        client = rt.live.transport["client"] = RpcClient(socket)
    return client


def install_http_routes(rt, module) -> None:
    """Register ``POST /dsv41_flags/set`` and ``GET /dsv41_flags/status`` on sglang's HTTP
    ``app`` and remember the RPC endpoint when ``_setup_and_run_http_server`` runs (idempotent).

    ``POST /dsv41_flags/set`` body ``{"name": "folded_fence", "value": "on", "requested_by":
    "alice"}``: 200 and the schedulers' answer when applied on every rank, 400 on a bad request
    (unknown feature, bad value, not live-safe), 409 when a rank refused (nothing changed), 504
    when no answer came. ``GET /dsv41_flags/status``: ``{ok, server, ranks}``."""
    import asyncio

    from fastapi import Request
    from fastapi.responses import JSONResponse

    app = module.app
    rt.ledger.patch(BUILTIN, module, "_setup_and_run_http_server", _capture_port_args(rt))
    if any(getattr(r, "path", None) == SET_PATH for r in app.routes):
        return

    async def dsv41_flags_set(request: Request):
        try:
            body = await request.json()
        except ValueError:
            body = None
        if not isinstance(body, dict) or "name" not in body or "value" not in body:
            return JSONResponse({"ok": False, "error": 'expected a JSON body {"name": FEATURE, '
                                 '"value": on|off, "requested_by": WHO}'}, status_code=400)
        name = feature_name(str(body["name"]))
        client = request.client.host if request.client else "unknown"
        requested_by = str(body.get("requested_by") or f"http {client}")
        try:
            _, new = check_declared(rt.features, name, body["value"])
        except SwitchError as exc:
            return JSONResponse({"ok": False, "feature": name, "error": str(exc)}, status_code=400)
        try:
            data = await asyncio.to_thread(_server_client(rt).call, SET_METHOD, name=name,
                                           value=new, requested_by=requested_by)
        except SwitchError as exc:
            return JSONResponse({"ok": False, "feature": name, "error": str(exc)}, status_code=504)
        return JSONResponse(data, status_code=200 if data.get("ok") else 409)

    async def dsv41_flags_status(request: Request):
        try:
            data = await asyncio.to_thread(_server_client(rt).call, STATUS_METHOD)
        except SwitchError as exc:
            data = {"ok": False, "error": str(exc), "ranks": []}
        data["server"] = process_status(rt)
        return JSONResponse(data, status_code=200 if data.get("ok") else 504)

    # this module's annotations are strings (``from __future__ import annotations``) and Request
    # is not a module global: give FastAPI the class itself
    for endpoint in (dsv41_flags_set, dsv41_flags_status):
        endpoint.__annotations__ = {"request": Request}
    app.add_api_route(SET_PATH, dsv41_flags_set, methods=["POST"])
    app.add_api_route(STATUS_PATH, dsv41_flags_status, methods=["GET"])


def arm_live(rt) -> bool:
    """When a live feature is declared: install the scheduler RPC methods when sglang's scheduler
    module is imported, and the HTTP routes when its HTTP server module is (post-import hooks;
    each fires only in the process that imports the module). Returns False when there is no
    live feature (nothing registered)."""
    if rt.live.transport.get("armed") or not any(f.live for f in rt.features.values()):
        return False
    from dsv41_flags.hooks import register_post_import_hook

    rt.live.transport["armed"] = True
    register_post_import_hook(lambda m: install_scheduler_rpc(rt, m), SCHEDULER_MODULE)
    register_post_import_hook(lambda m: install_http_routes(rt, m), HTTP_MODULE)
    return True


# ------------------------------------------------------------------ CLI side (HTTP client)
def _http(url: str, path: str, body: dict | None, timeout_s: float) -> tuple[int, dict]:
    import urllib.error
    import urllib.request

    full = url.rstrip("/") + path
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(full, data=data, method="GET" if body is None else "POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
        if status == 404:
            raise SwitchError(f"{full}: 404, the server has no dsv41_flags routes (is dsv41_flags "
                              f"installed in the server's environment, with a live feature "
                              f"declared?)") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise SwitchError(f"cannot reach {full}: {reason} (is the sglang server running there?)") from None
    try:
        payload = json.loads(raw)
    except ValueError:
        raise SwitchError(f"{full}: HTTP {status}, not a JSON answer: {raw[:200]!r}") from None
    return status, payload if isinstance(payload, dict) else {"ok": False, "error": repr(payload)}


def http_set(url: str, name: str, value: Any, requested_by: str,
             timeout_s: float = RPC_TIMEOUT_S + 5) -> dict:
    """``POST URL/dsv41_flags/set``; returns the answer (``ok`` False when refused). Raises
    SwitchError when the server cannot be reached or has no such route."""
    _, data = _http(url, SET_PATH, {"name": name, "value": value, "requested_by": requested_by},
                    timeout_s)
    return data


def http_status(url: str, timeout_s: float = RPC_TIMEOUT_S + 5) -> dict:
    """``GET URL/dsv41_flags/status``: ``{ok, server, ranks}``. Raises SwitchError when the
    server cannot be reached or has no such route."""
    return _http(url, STATUS_PATH, None, timeout_s)[1]


#: the rank guard's hook point: sglang's model-parallel world is initialised here (every
#: scheduler process calls it once, with the world's CPU group ready afterwards)
GUARD_TARGET = "sglang.srt.distributed.parallel_state.initialize_model_parallel"


def on_world_ready(callback: Callable[[Any], None]) -> bool:
    """Register ``callback(cpu_group)`` as an AFTER hook on ``initialize_model_parallel`` through
    sglang's HookRegistry (applied by ``load_plugins()``); the hook returns the function's result
    unchanged. Returns False when sglang's plugin system is not importable."""
    try:
        from sglang.srt.plugins.hook_registry import HookRegistry, HookType
    except ImportError:
        return False

    def after(result, *args, **kwargs):
        """HookRegistry AFTER hook: call back with the world's CPU group, keep the result."""
        from sglang.srt.distributed.parallel_state import get_world_group

        callback(get_world_group().cpu_group)
        return result

    HookRegistry.register(GUARD_TARGET, after, HookType.AFTER)
    return True


def load() -> None:
    """sglang's plugin entry (group ``sglang.srt.plugins``): activate dsv41_flags in this sglang
    process (once), with its role and ranks read from the calling ``run_<role>_process`` frame
    BEFORE activating, so every event from ``flags.resolved`` on carries them; then register the
    rank consistency guard at ``on_world_ready`` (schedulers only).

    sglang 0.5.23 calls ``load_plugins()`` in the main process and at the start of every
    scheduler, detokenizer and data-parallel controller process (all started with ``spawn``).
    Error policy (``_activation.fail``): any exception while activating, not only FlagsError,
    emits ``flags.error`` (entry ``sglang-plugin``); in strict mode the process stops with
    ``SystemExit(3)``: sglang's ``load_plugins()`` logs and swallows a plugin's ``Exception``
    ("Failed to execute general plugin") and would boot with nothing armed; SystemExit is not an
    Exception, so the boot stops here. Non-strict: the process runs, the event says what is on."""
    try:
        from dsv41_flags.activation import EXIT_STRICT, activate_entry, fail
    except Exception as exc:  # the package itself is broken here: no event possible
        from dsv41_flags_plugin import stop_unloadable

        stop_unloadable("importing dsv41_flags", exc)
        return

    try:
        ctx = caller_context()
    except Exception:  # an unexpected frame shape: role and ranks unknown, activation goes on
        ctx = {}
    role = ctx.pop("role", None)
    rt = activate_entry(PLUGIN_ENTRY_NAME, role=role, context=ctx)
    if rt is None:
        # activation failed, non-strict: this rank still registers the guard (with no runtime)
        # so it joins the ranks' all_gather; otherwise the other ranks would block in it
        if role in NO_GUARD_ROLES or not _guard_once():
            return
        reason = _failure_reason()
        try:
            from dsv41_flags.rank_guard import register_guard

            register_guard(None, reason=reason, engine=ADAPTER)
        except Exception as exc:
            fail(exc, PLUGIN_ENTRY_NAME, role, ctx)  # non-strict here: it runs on
        return
    if any(f.live for f in rt.features.values()):
        # live switches over sglang's RPC path: methods on Scheduler, routes on the HTTP app
        try:
            arm_live(rt)
        except Exception as exc:
            if fail(exc, PLUGIN_ENTRY_NAME, role, ctx):
                raise SystemExit(EXIT_STRICT) from None
    # only schedulers initialise the model-parallel world; elsewhere the hook would only cost an
    # import of sglang's parallel_state
    if rt.guard_registered or rt.context.fields.get("role") in NO_GUARD_ROLES:
        return
    try:
        from dsv41_flags.rank_guard import register_guard

        rt.guard_registered = register_guard(rt, engine=ADAPTER)
    except Exception as exc:
        if fail(exc, PLUGIN_ENTRY_NAME, role, ctx):
            raise SystemExit(EXIT_STRICT) from None


_NO_RUNTIME_GUARD: list[int] = []  # pids where the no-runtime guard is registered


def _guard_once() -> bool:
    """True the first time in this process (``load_plugins()`` may call ``load`` again)."""
    if os.getpid() in _NO_RUNTIME_GUARD:
        return False
    _NO_RUNTIME_GUARD.append(os.getpid())
    return True


def _failure_reason() -> str:
    """Why this process has no runtime (the latched activation error), for the guard's view."""
    from dsv41_flags.activation import process_state

    failed = process_state()[1]
    if failed is None:
        return "activation failed"
    exc = failed[1]
    exc = exc.__cause__ if exc.__cause__ is not None and type(exc).__name__ == "ActivationError" else exc
    return f"{type(exc).__name__}: {exc}"[:300]


#: the sglang distribution and the range every shipped feature was ported against
DISTRIBUTION = "sglang"
DEFAULT_RANGE = "sglang>=0.5.23,<0.6"

#: this room behind the seam (``_engine.EngineAdapter``), declared in the entry-point group
#: ``dsv41_flags.engines`` (pyproject)
ADAPTER = EngineAdapter(
    name=DISTRIBUTION,
    default_range=DEFAULT_RANGE,
    fingerprint=FINGERPRINT,
    plugin_entry=load,
    on_world_ready=on_world_ready,
    process_context=caller_context,
    will_activate=plugin_will_activate,
    switch=switch_engine,
    status=engine_status,
    remote_switch=http_set,
    remote_status=http_status,
)
