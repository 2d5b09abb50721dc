"""Internal module: not part of the public API (docs/reference.md, ``dsv41_flags.__all__``).

sglang's facts: its distribution, the version range shipped features were ported against,
and what it contributes to the launch fingerprint (``FINGERPRINT``), read from sglang 0.5.23's
source:

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
  restart to restart, without changing a kernel: ports, addresses, ranks, and per-node placement
  (CPU binding, visible devices, NUMA node, network interface names, node-local addresses and
  host names). One launch has one fingerprint on every node.
- **Volatile launch options** (``server_args`` fields, ``arg_groups/fields/*.py``): the HTTP
  ``--host`` / ``--port``, the rendezvous (``--dist-init-addr`` alias ``--nccl-init-addr``,
  ``--nccl-port``, ``--node-rank``), and the other ports and addresses of one node (gRPC, sidecar,
  bootstrap servers, gated launch, remote weight loader), and per-node placement (``--base-gpu-id``,
  ``--numa-node``, InfiniBand device lists). ``--nnodes`` and every size stay in: the nodes of one
  launch agree on them.

- **Option spellings** (``canonical_argv``): for sglang's launchers, aliases and unique
  abbreviations become the canonical option, as sglang's argparse parser reads them (``--tp 16``
  is ``--tp-size 16``), and ``sglang serve`` is the ``sglang.launch_server`` it runs; the option
  table is sglang 0.5.23's, shipped as data (``_data/sglang_options.json``), never read from the
  machine's installed engine (``server_options``).

An operator's ``[default.fingerprint]`` table adds to these; it never has to repeat them.

Standard library only: every process that computes a fingerprint imports this module.
"""
from __future__ import annotations

import functools
import importlib.metadata
import json
from pathlib import Path
from typing import Mapping

from dsv41_flags.engine import EngineFacts

#: the sglang distribution and the range every shipped feature was ported against
DISTRIBUTION = "sglang"
DEFAULT_RANGE = "sglang>=0.5.23,<0.6"

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
    # per-node placement: which cores, devices, interfaces and addresses this node's processes
    # use; the nodes of one launch may differ there, and so may one node from boot to boot
    "SGLANG_CPU_OMP_THREADS_BIND": "CPU cores this node's ranks are bound to (placement)",
    "SGLANG_HICACHE_HOST_NUMA_NODE": "NUMA node of this node's host cache (placement)",
    "SGLANG_HOST_IP": "address of this node",
    "SGLANG_LOCAL_IP_NIC": "network interface of this node",
    "SGLANG_TP_RANK": "differs between the processes of one launch (tensor-parallel rank)",
    "SGLANG_CUDA_COREDUMP_DIR": "directory on this node for core dumps",
    "CUDA_VISIBLE_DEVICES": "devices visible on this node (placement)",
    "HIP_VISIBLE_DEVICES": "devices visible on this node (placement)",
    "ROCR_VISIBLE_DEVICES": "devices visible on this node (placement)",
    "ASCEND_RT_VISIBLE_DEVICES": "devices visible on this node (placement)",
    "ZE_AFFINITY_MASK": "devices visible on this node (placement)",
    "NCCL_SOCKET_FAMILY": "address family of this node's interface (NCCL)",
    "NCCL_IB_GID_INDEX": "InfiniBand GID of this node's adapters (NCCL)",
    "NCCL_NET_DEVICES": "network devices of this node (NCCL)",
    "GLOO_SOCKET_IFNAME": "network interface of this node (gloo)",
    "TP_SOCKET_IFNAME": "network interface of this node (tensorpipe)",
    "UCX_NET_DEVICES": "network devices of this node (UCX)",
    "MASTER_ADDR": "rendezvous address (torch.distributed)",
    "MASTER_PORT": "rendezvous port (torch.distributed)",
    "HOSTNAME": "name of this node",
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
    "--base-gpu-id": "first device this node's ranks use (placement)",
    "--numa-node": "NUMA node of each of this node's ranks (placement)",
    "--disaggregation-ib-device": "InfiniBand devices of this node",
    "--mooncake-ib-device": "InfiniBand devices of this node",
}

#: secret name -> what it names (``secrecy.is_secret``: the core's own list adds to these)
SECRET_NAMES: dict[str, str] = {
    "api-key": "--api-key / --admin-api-key (srt/server_args.py; sglang's /server_info shows "
               "them, upstream #30166)",
    "ssl-keyfile-password": "--ssl-keyfile-password (srt/server_args.py)",
    "hf-token": "a Hugging Face token (SGLANG_HF_TOKEN, HF_TOKEN)",
    "hub-token": "a Hugging Face hub token (HUGGING_FACE_HUB_TOKEN)",
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
    8 s): ``ServerArgs.add_cli_args`` on an ``argparse`` parser that records what its public
    ``add_argument`` returns, each ``--`` option string -> the
    first option string of its action (a ``--no-`` string of a ``BooleanOptionalAction`` -> itself).
    Used to generate the shipped table and, in the engine tier, to check it. Raises ImportError
    when sglang is not installed."""
    import argparse

    from sglang.srt.server_args import ServerArgs

    class RecordingParser(argparse.ArgumentParser):
        """An argparse parser that keeps every action ``add_argument`` returns (public API)."""

        def __init__(self) -> None:
            super().__init__(add_help=False)
            self.recorded: list[argparse.Action] = []

        def add_argument(self, *args, **kwargs):
            action = super().add_argument(*args, **kwargs)
            self.recorded.append(action)
            return action

    parser = RecordingParser()
    ServerArgs.add_cli_args(parser)
    live = {}
    for action in parser.recorded:
        for option in action.option_strings:
            if not option.startswith("--"):
                continue
            negative = option.startswith("--no-") and isinstance(action, argparse.BooleanOptionalAction)
            live[option] = option if negative else action.option_strings[0]
    return dict(sorted(live.items()))


def write_server_options(path: Path | None = None) -> Path:
    """Regenerate the shipped option table from the installed sglang (after bumping the
    supported release; the engine tier fails until it is done):
    ``python -c "from dsv41_flags.engines.sglang.facts import write_server_options as w; print(w())"``.
    Writes ``{"release", "generated_by", "options"}`` JSON to ``path`` (default ``OPTIONS_FILE``)
    and returns the path. Raises ImportError when sglang is not installed."""
    path = OPTIONS_FILE if path is None else Path(path)
    data = {"release": f"sglang {importlib.metadata.version('sglang')}",
            "generated_by": "dsv41_flags.engines.sglang.facts.write_server_options() from "
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


def knows_options(argv: list[str]) -> bool:
    """True for a launch command (``normalize_argv`` form) of one of sglang's launchers, whose
    options ``canonical_argv`` spells in full by the shipped option table."""
    argv, _ = _serve_as_launch_server(list(argv))
    return bool(argv) and argv[0] in LAUNCHERS and not (
        argv[0] == "sglang" and (len(argv) < 2 or argv[1] != "serve"))


FINGERPRINT = EngineFacts(
    engine=ENGINE,
    prefixes=ENV_PREFIXES,
    volatile={**VOLATILE_ENV, **VOLATILE_ARGV},
    secrets=SECRET_NAMES,
    canonical_env=canonical_env,
    canonical_argv=canonical_argv,
    knows_options=knows_options,
)
