"""The server tier's tools: a real ``python -m sglang.launch_server`` on this CPU-only machine,
driven from outside (HTTP, the ``dsv41-flags`` command, the JSON event lines the processes print).

Nothing here imports dsv41_flags: the tier is black-box. What a launch needs on a CPU is built
at test time in a session directory (see ``Kit``):

- the package's CPU platform plugin (entry point ``dsv41_cpu`` of ``sglang.srt.platforms``,
  selected with ``SGLANG_PLATFORM``): the in-tree CPU platform declared out of tree, whose
  capabilities say no graph capture and no PyNccl (without it, tp 2 dies creating PyNccl and tp 1
  dies importing vllm);
- a model directory holding only a tiny Llama ``config.json`` (``--load-format dummy``);
- a HOME and cache directories shared by every process of the session (no test writes into the
  user's home or cache; the torch inductor cache compiled by the first boot serves the later ones);
- a settings file (both shipped features off), named by ``DSV41_SETTINGS``.

Every wait is bounded; a launch runs in its own session (process group) and its whole group is
stopped at the end (SIGTERM, then SIGKILL after a bound).
"""
from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

#: seconds from start to GET /health answering 200 (21-57 s on 2 quiet cores; a machine shared
#: with other test runs may need more: SERVER_TIER_BOOT_TIMEOUT=<seconds>)
BOOT_TIMEOUT = float(os.environ.get("SERVER_TIER_BOOT_TIMEOUT") or 240.0)
STOP_TIMEOUT = 20.0       # seconds between SIGTERM and SIGKILL of a launch's process group
CLI_TIMEOUT = 120.0       # seconds for one dsv41-flags command

#: the packaged CPU platform plugin (dsv41_flags.engines.sglang.cpu_platform), by its entry-point name
PLATFORM_NAME = "dsv41_cpu"

TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 1000,
    "torch_dtype": "float32",
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-6,
    "hidden_act": "silu",
    "rope_theta": 10000.0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "tie_word_embeddings": False,
}

SETTINGS = "[default]\nfolded_fence = false\nautotune_keep = false\nstrict = true\n"

GENERATE_BODY = {"input_ids": [1, 2, 3, 4], "sampling_params": {"max_new_tokens": 8, "temperature": 0}}

#: variables of the caller's environment that would change what a launch does; never handed on
_DROPPED_PREFIXES = ("DSV41_", "SGLANG_", "SGL_", "PROMETHEUS_MULTIPROC_DIR", "CUDA_VISIBLE_DEVICES",
                     "TORCHINDUCTOR_", "TRITON_CACHE_DIR", "FLASHINFER_", "HF_", "TORCH_HOME")


def server_args(model: Path, tp: int, port: int, *extra: str) -> list[str]:
    """The arguments of ``python -m sglang.launch_server`` that serve on this CPU-only machine."""
    return ["--model-path", str(model), "--load-format", "dummy", "--skip-tokenizer-init",
            "--device", "cpu", "--tp", str(tp), "--attention-backend", "torch_native",
            "--disable-cuda-graph", "--sampling-backend", "pytorch", "--max-total-tokens", "4096",
            "--disable-overlap-schedule", "--dtype", "float32", "--skip-server-warmup",
            "--sleep-on-idle", "--port", str(port), *extra]


# ------------------------------------------------------------------ ports
_taken: list[int] = []
_taken_lock = threading.Lock()
PORT_SPAN = 50      # ports kept free above a launch's --port (sglang takes some after it)
PORT_GAP = 1000     # distance between two blocks handed out in this session


def _free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_block(span: int = PORT_SPAN) -> int:
    """A port P such that P..P+span-1 are free now, at least PORT_GAP away from every block this
    session handed out (random, so that concurrent test runs on the machine rarely meet)."""
    rng = random.Random()
    with _taken_lock:
        for _ in range(500):
            base = rng.randrange(20000, 60000 - span)
            if any(abs(base - other) < PORT_GAP for other in _taken):
                continue
            if all(_free(p) for p in range(base, base + span)):
                _taken.append(base)
                return base
    raise RuntimeError("no block of free ports found")


# ------------------------------------------------------------------ events and HTTP
def parse_events(text: str) -> list[dict]:
    """The structured events in ``text``: every line that is a JSON object with an ``event``."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and isinstance(data.get("event"), str):
            out.append(data)
    return out


def http(method: str, url: str, body: dict | None = None, headers: dict | None = None,
         timeout: float = 30.0) -> tuple[int, str]:
    """``(status, body text)`` of one request (an HTTP error status is returned, not raised)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")


def group_members(pgid: int) -> list[int]:
    """The processes of group ``pgid`` that still run (zombies left out), read from /proc."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


# ------------------------------------------------------------------ the session kit
@dataclass
class Kit:
    """What every launch of the session shares (see the module docstring)."""

    root: Path
    model_dir: Path = field(init=False)
    home: Path = field(init=False)
    settings: Path = field(init=False)
    python: Path = field(init=False)
    cli: Path = field(init=False)

    def __post_init__(self) -> None:
        self.model_dir = self.root / "tiny-llama"
        self.model_dir.mkdir(parents=True)
        (self.model_dir / "config.json").write_text(json.dumps(TINY_LLAMA, indent=1))
        self.home = self.root / "home"
        (self.home / ".cache").mkdir(parents=True)
        self.settings = self.root / "settings.toml"
        self.settings.write_text(SETTINGS)
        # the environment's interpreter and its dsv41-flags command (the tier's black box)
        self.python = Path(sys.executable)
        self.cli = self.python.with_name("dsv41-flags")

    def env(self, bind: str = "0", extra: dict | None = None, pythonpath: list[Path] = ()) -> dict:
        """The environment of a launch or a command: the caller's, without any variable that
        would change the launch, plus the session's HOME and caches, the platform, the settings
        file, JSON event lines and ``SGLANG_CPU_OMP_THREADS_BIND=bind``."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(_DROPPED_PREFIXES)}
        cache = self.home / ".cache"
        inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        env.update({
            "PATH": os.pathsep.join([str(self.python.parent), env.get("PATH", "")]),
            "HOME": str(self.home),
            "XDG_CACHE_HOME": str(cache),
            "XDG_CONFIG_HOME": str(self.home / ".config"),
            "XDG_DATA_HOME": str(self.home / ".local" / "share"),
            "SGLANG_CACHE_DIR": str(cache / "sglang"),
            "TORCHINDUCTOR_CACHE_DIR": str(cache / "sglang" / "inductor"),
            "TRITON_CACHE_DIR": str(cache / "sglang" / "triton"),
            "FLASHINFER_WORKSPACE_BASE": str(cache / "sglang"),
            "HF_HOME": str(cache / "huggingface"),
            "TORCH_HOME": str(cache / "torch"),
            "PYTHONPATH": os.pathsep.join([str(p) for p in pythonpath] + inherited),
            "PYTHONDONTWRITEBYTECODE": "1",   # no __pycache__ beside the package or its features
            "PYTHONUNBUFFERED": "1",
            "SGLANG_PLATFORM": PLATFORM_NAME,
            "SGLANG_CPU_OMP_THREADS_BIND": bind,
            "DSV41_LOG_FORMAT": "json",
            "DSV41_SETTINGS": str(self.settings),
        })
        env.update(extra or {})
        return env

    def run_cli(self, *args: str, env: dict | None = None, timeout: float = CLI_TIMEOUT,
                cwd: Path | None = None) -> subprocess.CompletedProcess:
        """``dsv41-flags ARGS`` (bounded); the environment is ``env`` or the session's."""
        return subprocess.run([str(self.cli), *args], env=env or self.env(), cwd=cwd or self.root,
                              capture_output=True, text=True, timeout=timeout)

    def cli_json(self, *args: str, env: dict | None = None, timeout: float = CLI_TIMEOUT,
                 cwd: Path | None = None) -> tuple[int, dict]:
        """``(exit status, the JSON object printed)`` of ``dsv41-flags ARGS --json`` (``--json``
        goes before a ``--`` that starts a command)."""
        args = list(args)
        args.insert(args.index("--") if "--" in args else len(args), "--json")
        proc = self.run_cli(*args, env=env, timeout=timeout, cwd=cwd)
        try:
            data = json.loads(proc.stdout)
        except ValueError:
            raise AssertionError(f"dsv41-flags {' '.join(args)} printed no JSON object "
                                 f"(exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}") from None
        return proc.returncode, data


# ------------------------------------------------------------------ one launch
class Launch:
    """One launch (``python -m sglang.launch_server ...`` or any command) in its own process group,
    stdout and stderr captured to files in ``workdir``."""

    def __init__(self, kit: Kit, name: str, workdir: Path, command: list[str], env: dict,
                 port: int | None = None):
        self.kit, self.name, self.workdir, self.command, self.env = kit, name, workdir, command, env
        self.port = port
        self.url = f"http://127.0.0.1:{port}" if port else ""
        self.proc: subprocess.Popen | None = None
        self.stdout_path = workdir / f"{name}.stdout.txt"
        self.stderr_path = workdir / f"{name}.stderr.txt"
        self.boot_s: float | None = None
        self._started = 0.0

    @classmethod
    def server(cls, kit: Kit, name: str, workdir: Path, *, tp: int = 2, extra_args: tuple = (),
               bind: str | None = None, env_extra: dict | None = None, prefix: tuple = (),
               port: int | None = None, pythonpath: tuple = ()) -> "Launch":
        """``[*prefix] python -m sglang.launch_server <the CPU arguments> --tp tp --port P
        *extra_args`` with the session's environment (``bind`` defaults to one CPU per local
        scheduler: ``"0|1"`` at tp 2, ``"0"`` at tp 1; ``pythonpath``: directories put first on
        ``PYTHONPATH``)."""
        port = port or free_port_block()
        bind = bind if bind is not None else "|".join(str(i) for i in range(tp))
        command = [*prefix, "python", "-m", "sglang.launch_server",
                   *server_args(kit.model_dir, tp, port, *extra_args)]
        return cls(kit, name, workdir, command, kit.env(bind, env_extra, pythonpath), port)

    # -------------------------------------------------------------- life cycle
    def start(self) -> "Launch":
        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(self.command, env=self.env, cwd=self.workdir,
                                         stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                         start_new_session=True)
        self._started = time.monotonic()
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_healthy(self, timeout: float = BOOT_TIMEOUT) -> "Launch":
        """Wait until ``GET /health`` answers 200; raise (with the log's tail) when the launch
        exits first or ``timeout`` seconds pass."""
        deadline = self._started + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise AssertionError(f"{self.name}: the launch exited with status "
                                     f"{self.proc.returncode} before serving\n{self.tail()}")
            try:
                status, _ = http("GET", self.url + "/health", timeout=10)
            except OSError:
                status = None
            if status == 200:
                self.boot_s = time.monotonic() - self._started
                return self
            time.sleep(1.0)
        raise AssertionError(f"{self.name}: GET /health did not answer 200 within {timeout:.0f} s"
                             f"\n{self.tail()}")

    def wait_exit(self, timeout: float) -> int | None:
        """The exit status, or None when the launch is still running after ``timeout`` s."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self) -> None:
        """SIGTERM to the launch's process group, SIGKILL after STOP_TIMEOUT s, then reap."""
        if self.proc is None:
            return
        pgid = self.proc.pid  # start_new_session: the launch leads its own group
        for sig, wait in ((signal.SIGTERM, STOP_TIMEOUT), (signal.SIGKILL, 10.0)):
            self.proc.poll()
            if not group_members(pgid):
                break
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                self.proc.poll()
                if not group_members(pgid):
                    break
                time.sleep(0.2)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    # -------------------------------------------------------------- what it printed
    def text(self) -> str:
        parts = []
        for path in (self.stdout_path, self.stderr_path):
            if path.is_file():
                parts.append(path.read_text(errors="replace"))
        return "\n".join(parts)

    def events(self, name: str | None = None) -> list[dict]:
        evs = parse_events(self.text())
        return [e for e in evs if name is None or e["event"] == name]

    def tail(self, n: int = 60) -> str:
        lines = self.text().splitlines()
        return "\n".join(line[:400] for line in lines[-n:])

    def wait_events(self, name: str, count: int, timeout: float = 30.0, **fields) -> list[dict]:
        """The ``name`` events whose ``fields`` match (key -> value), once at least ``count`` are
        printed or after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            evs = [e for e in self.events(name) if all(e.get(k) == v for k, v in fields.items())]
            if len(evs) >= count or time.monotonic() > deadline:
                return evs
            time.sleep(0.5)


# ------------------------------------------------------------------ load
class Load:
    """``threads`` clients posting ``GENERATE_BODY`` to ``url``/generate, each at most
    ``per_thread`` times, until ``stop()`` or ``deadline_s``; every answer is recorded."""

    def __init__(self, url: str, threads: int = 4, per_thread: int = 40, deadline_s: float = 240.0,
                 headers: dict | None = None):
        self.url, self.per_thread, self.headers = url, per_thread, headers or {}
        self.deadline = time.monotonic() + deadline_s
        self.results: list[tuple[int | str, str]] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._client, daemon=True) for _ in range(threads)]

    def _client(self) -> None:
        for _ in range(self.per_thread):
            if self.stopping.is_set() or time.monotonic() > self.deadline:
                return
            try:
                status, body = http("POST", self.url + "/generate", GENERATE_BODY, self.headers,
                                    timeout=120)
            except OSError as exc:  # a refused or reset connection is a failed request too
                status, body = f"{type(exc).__name__}: {exc}", ""
            with self.lock:
                self.results.append((status, body))

    def start(self) -> "Load":
        for t in self.threads:
            t.start()
        return self

    def done(self) -> int:
        with self.lock:
            return len(self.results)

    def wait_done(self, count: int, timeout: float = 120.0) -> int:
        """Wait until ``count`` answers came in (bounded); returns how many did."""
        deadline = time.monotonic() + timeout
        while self.done() < count and time.monotonic() < deadline and self.running():
            time.sleep(0.2)
        return self.done()

    def running(self) -> bool:
        return any(t.is_alive() for t in self.threads)

    def stop(self, timeout: float = 150.0) -> None:
        self.stopping.set()
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.1, deadline - time.monotonic()))


def verify_cap_feature(name: str) -> str:
    """The source of an operator feature ``name``: live, it caps ``max_new_tokens`` at 3 in
    ``SamplingParams.verify`` (called by the tokenizer manager, so it runs in the HTTP server
    process and a switch changes what ``/generate`` answers)."""
    return f'''
"""Cap max_new_tokens at 3 where sglang checks a request's sampling parameters (the HTTP
server process)."""
from dsv41_flags import Feature


def install(module, ctx):
    def make(original):
        def verify(self, *args, **kwargs):
            if self.max_new_tokens is None or self.max_new_tokens > 3:
                self.max_new_tokens = 3
            return original(self, *args, **kwargs)
        return verify

    ctx.patch(module.SamplingParams, "verify", make)


FEATURE = Feature(name="{name}", target="sglang.srt.sampling.sampling_params",
                  install=install, summary="Cap max_new_tokens at 3 in SamplingParams.verify",
                  requires=("SamplingParams.verify",), live=True)
'''
