"""sglang#40919 on a real GPU: the folded-verify race counted with and without ``folded_fence``,
and what the fence costs per step.

    python bench/gpu_fence.py [--quick] [--steps N] [--out-dir DIR] [--out FILE]

Without a CUDA device it prints ``gpu_fence: skipped: <why>`` and exits 0 (``--out`` then holds
``{"skipped": why, "rows": [], "details": {}}``), so CI and ``bench/run.py`` machines without a GPU
stay green. The exit status is 1 only when a measurement crashed.

The pattern (sglang 0.5.23 ``sglang.srt.speculative.dspark_components.dspark_verify``): a CUDA graph
holds the target verify and its epilogue (``DsparkVerifyEpilogue.capture_hook``), which writes the
accept results into persistent buffers (``correct_len_buf``, ``bonus_buf``, ``cap_trim_lens_buf``,
``commit_lens_buf``, ``new_seq_lens_buf``, ``out_tokens_buf``); one replay per step on the forward
stream; ``TargetVerifyExecutor.accept_and_finalize(folded_accept=True, ...)`` returns views of those
buffers (``read_accept``); the overlap scheduler copies the step's results to pinned host memory
with ``non_blocking=True`` on a second (copy) stream after waiting for the verify's event, while
the forward stream already replays the next step, which rewrites the same buffers.

Target. The real module is used when it imports and its epilogue captures on this machine
(``target: real``). Otherwise the output names the line that stopped it and the benchmark uses a
reproduction of the same pattern (``target: reproduction``, labelled in every row): the same three
names with the same buffers (names, dtypes, shapes), the greedy accept written into them by a
captured graph, ``read_accept`` returning views, and ``accept_and_finalize(*, folded_accept, bs,
...)``. The reproduction is registered under the target's module name and announced to the
post-import hooks (``wrapt.notify_module_loaded``), so the framework installs the shipped feature
through its real path either way.

Scenarios, each in a fresh interpreter (one runtime per process):

- ``none``: no framework; the pristine ``accept_and_finalize``.
- ``armed``: ``activate()`` from a settings file with ``folded_fence = true``, before the target
  is imported; the post-import hook installs the feature (state ``installed``).
- ``live``: ``activate()`` from a settings file with ``folded_fence = false``: installed bypassed;
  half the steps bypassed, then ``Runtime.switch("folded_fence", "on")`` between two steps and the
  other half fenced.
- ``cost``: per batch size (1, 8, 64, 256), the forward stream's time per step (CUDA events
  around input copies, replay and ``accept_and_finalize``) and the host's wall time per step,
  alternating rounds of: the original method called directly, the wrapper switched on (fence),
  the wrapper bypassed. Ratios are medians of per-round ratios, with their spread.

A mismatch is a step whose host copy differs from what that step's verify produced (in any of the
six fields); ``next`` counts those equal to the *next* step's results: the replay overwrote them.

Race variants (what was tried to make the race appear): the graph's prologue (``lm_head``: a
7168 x 129280 bf16 matmul producing the logits, as a target's LM head; ``none``: only the
epilogue, logits planted), copy-stream backlog (an 8 MiB device-to-host copy queued ahead of the
six, as other results copied first), stream priorities (forward high, copy low) and the host
enqueueing the copy after it launched the next replay (a scheduler thread that is late).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import types
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
if str(REPO / "src") not in sys.path:  # this tree's framework, whatever the environment installs
    sys.path.insert(0, str(REPO / "src"))

TARGET = "sglang.srt.speculative.dspark_components.dspark_verify"
FEATURE = "folded_fence"
BATCH_SIZES = (1, 8, 64, 256)
RACE_BS = 64
STRIDE = 4               # verify_num_draft_tokens: the current token + gamma = 3 drafts
HIDDEN = 7168            # DeepSeek-V3/V4 hidden size and vocabulary: the lm_head prologue
VOCAB = 129280
SMALL_VOCAB = 4096       # the "none" prologue's planted logits
PATTERNS = 8             # distinct verify outcomes, cycled step by step
DEPTH = 2                # steps in flight before the oldest host copy is checked
BACKLOG_BYTES = 8 << 20
#: (name, prologue, backlog, priorities, late enqueue)
VARIANTS = (
    ("lm_head", "lm_head", False, False, False),
    ("lm_head+backlog", "lm_head", True, False, False),
    ("lm_head+backlog+prio", "lm_head", True, True, False),
    ("lm_head+late", "lm_head", False, False, True),
    ("none", "none", False, False, False),
    ("none+backlog", "none", True, False, False),
    ("none+backlog+prio", "none", True, True, False),
    ("none+late", "none", False, False, True),
)


def skip_reason() -> str | None:
    """Why this machine cannot run the benchmark (no torch, no CUDA device), or None."""
    try:
        import torch
    except ImportError as exc:
        return f"torch is not importable ({exc})"
    if not torch.cuda.is_available():
        return (f"no CUDA device (torch {torch.__version__}, built for CUDA "
                f"{torch.version.cuda or 'none'}, torch.cuda.is_available() is False)")
    return None


# ------------------------------------------------------------------------------ the target
def fields() -> tuple[str, ...]:
    """The six AcceptOuts fields the shipped feature clones (its own declaration)."""
    from dsv41_flags._data.features.folded_fence import FIELDS
    return FIELDS


def stop_line(exc: BaseException) -> str:
    """``file:line: code -> ExcType: message`` of the frame that raised ``exc`` (the deepest one
    inside sglang when there is one)."""
    frames = traceback.extract_tb(exc.__traceback__)
    inside = [f for f in frames if "/sglang/" in f.filename] or frames
    f = inside[-1] if inside else None
    where = ""
    if f is not None:
        path = f.filename.split("site-packages/")[-1]
        where = f"{path}:{f.lineno}: {(f.line or '').strip()} -> "
    return f"{where}{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def reproduction_module():
    """A module shaped like sglang 0.5.23's dspark_verify for the folded path (see the module
    docstring): ``AcceptOuts``, ``DsparkVerifyEpilogue`` (same buffers, ``capture_step`` writes the
    greedy accept into them, ``read_accept`` returns views) and ``TargetVerifyExecutor``."""
    import torch

    mod = types.ModuleType(TARGET, "reproduction of sglang 0.5.23 dspark_verify's folded path")
    field_names = fields()

    class AcceptOuts:
        __slots__ = field_names

        def __init__(self, *, correct_len, bonus, cap_trim_lens, commit_lens, new_seq_lens,
                     out_tokens):
            self.correct_len, self.bonus, self.cap_trim_lens = correct_len, bonus, cap_trim_lens
            self.commit_lens, self.new_seq_lens, self.out_tokens = commit_lens, new_seq_lens, out_tokens

    class DsparkVerifyEpilogue:
        def __init__(self, *, max_bs, verify_num_draft_tokens, device):
            self.max_bs, self.stride = int(max_bs), int(verify_num_draft_tokens)
            z = lambda *shape, dtype=torch.int64: torch.zeros(shape, dtype=dtype, device=device)  # noqa: E731
            self.correct_len_buf = z(self.max_bs)
            self.bonus_buf = z(self.max_bs)
            self.cap_trim_lens_buf = z(self.max_bs, dtype=torch.int32)
            self.commit_lens_buf = z(self.max_bs, dtype=torch.int32)
            self.new_seq_lens_buf = z(self.max_bs)
            self.out_tokens_buf = z(self.max_bs, self.stride)

        def capture_step(self, candidates, logits, seq_lens):
            """The in-graph greedy accept: drafts accepted while candidates[:, 1:] equals the
            target's argmax[:, :-1]; the bonus is the argmax at the first mismatch."""
            bs = candidates.shape[0]
            predict = torch.argmax(logits, dim=-1).view(bs, self.stride)
            match = (candidates[:, 1:] == predict[:, :-1]).to(torch.int64)
            correct = match.cumprod(dim=1).sum(dim=1)
            bonus = predict.gather(1, correct.view(-1, 1)).view(-1)
            out = torch.cat([candidates[:, 1:], torch.zeros_like(candidates[:, :1])], dim=1)
            out.scatter_(1, correct.view(-1, 1), bonus.view(-1, 1))
            commit = (correct + 1).to(torch.int32)
            self.correct_len_buf[:bs].copy_(correct)
            self.bonus_buf[:bs].copy_(bonus)
            self.cap_trim_lens_buf[:bs].zero_()
            self.commit_lens_buf[:bs].copy_(commit)
            self.new_seq_lens_buf[:bs].copy_(seq_lens + commit)
            self.out_tokens_buf[:bs].copy_(out)

        def read_accept(self, bs):
            return AcceptOuts(correct_len=self.correct_len_buf[:bs], bonus=self.bonus_buf[:bs],
                              cap_trim_lens=self.cap_trim_lens_buf[:bs],
                              commit_lens=self.commit_lens_buf[:bs],
                              new_seq_lens=self.new_seq_lens_buf[:bs],
                              out_tokens=self.out_tokens_buf[:bs])

    class TargetVerifyExecutor:
        def __init__(self, *, verify_epilogue):
            self.verify_epilogue = verify_epilogue

        def accept_and_finalize(self, *, folded_accept, bs, verify_ids_2d=None, target_logits=None,
                                draft_block=None, sampling_info=None, draft_input=None,
                                layout=None, prefix_lens=None, draft_tokens=None,
                                simulate_bonus_sampling_info=None):
            if folded_accept:
                return self.verify_epilogue.read_accept(bs)
            raise NotImplementedError("the reproduction has only the folded path")

    for cls in (AcceptOuts, DsparkVerifyEpilogue, TargetVerifyExecutor):
        cls.__module__ = TARGET
        setattr(mod, cls.__name__, cls)
    return mod


def load_target(kind: str):
    """Import the target (``real``) or register and announce the reproduction. Returns the
    module; post-import hooks armed before this call fire here."""
    if kind == "real":
        import importlib
        return importlib.import_module(TARGET)
    import wrapt
    mod = reproduction_module()
    sys.modules[TARGET] = mod
    wrapt.notify_module_loaded(mod)
    return mod


class Rig:
    """One batch size: the epilogue and executor, static graph inputs, the captured verify graph
    (``replay``), and the per-pattern outcomes (``expected``)."""

    def __init__(self, dv, kind: str, bs: int, prologue: str, device: str, tp_group=None,
                 weight=None):
        import torch
        self.torch, self.dv, self.kind, self.bs, self.device = torch, dv, kind, bs, device
        self.prologue = prologue
        n = bs * STRIDE
        vocab = VOCAB if prologue == "lm_head" else SMALL_VOCAB
        self.vocab = vocab
        self.candidates = torch.zeros((bs, STRIDE), dtype=torch.int64, device=device)
        self.predict = torch.zeros((n,), dtype=torch.int64, device=device)
        self.seq_lens = torch.zeros((bs,), dtype=torch.int64, device=device)
        self.logits = torch.zeros((n, vocab), dtype=torch.float32, device=device)
        if prologue == "lm_head":
            gen = torch.Generator(device=device).manual_seed(1)
            self.hidden = torch.randn((n, HIDDEN), generator=gen, device=device, dtype=torch.bfloat16)
            self.weight = weight
        else:
            self.hidden = torch.zeros((n, 8), dtype=torch.float32, device=device)
        if kind == "real":
            self._real_parts(tp_group)
        else:
            self.epilogue = dv.DsparkVerifyEpilogue(max_bs=bs, verify_num_draft_tokens=STRIDE,
                                                    device=device)
            self.executor = dv.TargetVerifyExecutor(verify_epilogue=self.epilogue)
        self.graph = None

    def _real_parts(self, tp_group):
        from sglang.srt.layers.logits_processor import LogitsProcessorOutput
        from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
        dv, torch, bs, n = self.dv, self.torch, self.bs, self.bs * STRIDE
        tp_sync = dv.SpecTpSync(tp_group)
        self.epilogue = dv.DsparkVerifyEpilogue(max_bs=bs, verify_num_draft_tokens=STRIDE,
                                                device=self.device, tp_sync=tp_sync)
        # duck-typed collaborators: the real ones need a loaded model (as in the engine tests)
        target_worker = types.SimpleNamespace(model_runner=types.SimpleNamespace(
            model_config=types.SimpleNamespace(hf_text_config=types.SimpleNamespace(
                model_type="deepseek_v41"))))
        self.executor = dv.TargetVerifyExecutor(
            target_worker=target_worker, gamma=STRIDE - 1, verify_num_draft_tokens=STRIDE,
            model_runner=None, kv_injector=None, tp_sync=tp_sync, verify_epilogue=self.epilogue)
        self.runner = types.SimpleNamespace(model_runner=types.SimpleNamespace(is_draft_worker=False),
                                            ragged_verify_mode=False)
        dev = self.device
        self.forward_batch = ForwardBatch(
            forward_mode=ForwardMode.TARGET_VERIFY, batch_size=bs, input_ids=self.candidates.view(-1),
            req_pool_indices=torch.arange(1, bs + 1, device=dev), seq_lens=self.seq_lens,
            out_cache_loc=torch.arange(n, device=dev), seq_lens_sum=0,
            positions=torch.arange(n, device=dev))
        self.out = LogitsProcessorOutput(next_token_logits=self.logits, hidden_states=self.hidden)
        self.epilogue.begin_static_step(bs, armed=False)

    def body(self):
        """What the verify graph records: the logits (LM head or planted), then the epilogue."""
        torch = self.torch
        if self.prologue == "lm_head":
            self.logits.copy_(torch.matmul(self.hidden, self.weight).float().mul_(1e-3))
        else:
            self.logits.zero_()
        self.logits.scatter_(1, self.predict.view(-1, 1), 1e3)
        if self.kind == "real":
            self.epilogue.capture_hook(self.runner, self.out, self.forward_batch, self.bs * STRIDE)
        else:
            self.epilogue.capture_step(self.candidates, self.logits, self.seq_lens)

    def capture(self):
        """Warm up on a side stream, then capture ``body`` (no-op on the CPU: replays run it)."""
        torch = self.torch
        if self.device == "cpu":
            return
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                self.body()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.body()
        torch.cuda.synchronize()

    def replay(self):
        if self.graph is None:
            self.body()
        else:
            self.graph.replay()

    def folded_kwargs(self) -> dict:
        return dict(folded_accept=True, bs=self.bs, verify_ids_2d=None, target_logits=None,
                    draft_block=None, sampling_info=None, draft_input=None, layout=None,
                    prefix_lens=None, draft_tokens=None)

    def make_patterns(self, steps: int, seed: int = 0):
        """PATTERNS verify inputs with chosen accept lengths (row r of pattern k accepts
        ``(k + r) % STRIDE`` drafts, so consecutive steps differ in every field), device tables
        of them, per-step sequence lengths, and each pattern's outcome (run once, synchronised)."""
        torch, bs = self.torch, self.bs
        g = torch.Generator().manual_seed(seed)
        cands, preds = [], []
        for k in range(PATTERNS):
            pred = torch.randint(1, self.vocab, (bs, STRIDE), generator=g)
            cand = torch.randint(1, self.vocab, (bs, STRIDE), generator=g)
            for r in range(bs):
                a = (k + r) % STRIDE
                cand[r, 1:1 + a] = pred[r, :a]
                if a < STRIDE - 1 and cand[r, 1 + a] == pred[r, a]:
                    cand[r, 1 + a] = pred[r, a] % (self.vocab - 1) + 1
            cands.append(cand)
            preds.append(pred.view(-1))
        self.cand_table = torch.stack(cands).to(self.device)
        self.pred_table = torch.stack(preds).to(self.device)
        self.seq_host = (1000 + 8 * torch.arange(steps + 1)).view(-1, 1).repeat(1, bs) + torch.arange(bs)
        self.seq_table = self.seq_host.to(self.device)
        names = fields()
        self.outcome = []
        original = type(self.executor).__dict__["accept_and_finalize"]
        original = getattr(original, "__wrapped__", original)
        for k in range(PATTERNS):
            self.load(k, 0)
            self.replay()
            if self.device != "cpu":
                torch.cuda.synchronize()
            outs = original(self.executor, **self.folded_kwargs())
            got = {f: getattr(outs, f).to("cpu").clone() for f in names}
            assert torch.equal(got["new_seq_lens"], self.seq_host[0] + got["commit_lens"].to(torch.int64)), \
                "new_seq_lens != seq_lens + commit_lens: the expected values cannot be derived"
            self.outcome.append(got)

    def load(self, k: int, step: int):
        """Write step ``step``'s inputs (pattern ``k``) into the graph's static inputs (on the
        current stream, as the graph runner does before a replay)."""
        self.candidates.copy_(self.cand_table[k])
        self.predict.copy_(self.pred_table[k])
        self.seq_lens.copy_(self.seq_table[step])

    def expected(self, step: int) -> dict:
        got = dict(self.outcome[step % PATTERNS])
        got["new_seq_lens"] = self.seq_host[step] + got["commit_lens"].to(self.torch.int64)
        return got


def tp_group_or_none(kind: str):
    """A real sglang GroupCoordinator over a one-process gloo group for the real SpecTpSync."""
    if kind != "real":
        return None
    from datetime import timedelta

    import torch.distributed as dist
    from sglang.srt.distributed.parallel_state import GroupCoordinator
    store = Path(tempfile.mkdtemp(prefix="gpu_fence_pg_")) / "store"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1,
                            timeout=timedelta(seconds=60))
    return GroupCoordinator(group_ranks=[[0]], local_rank=0, torch_distributed_backend="gloo",
                            use_pynccl=False, use_mscclpp=False, use_custom_allreduce=False,
                            use_torch_symm_mem_all_reduce=False, use_hpu_communicator=False,
                            use_xpu_communicator=False, group_name="gpu_fence_tp")


# ------------------------------------------------------------------------------ the race
def race(rig: Rig, steps: int, *, backlog: bool, prio: bool, late: bool, accept,
         switch_at: int | None = None, switch=None) -> dict:
    """``steps`` overlapped steps; returns mismatch counts (before / after ``switch_at``, where
    ``switch()`` is called between two steps). On the CPU (dry run) the copy of a step runs after
    the next step's replay: the worst case, deterministic."""
    torch, names = rig.torch, fields()
    cpu = rig.device == "cpu"
    if cpu:
        fwd = cp = None
    else:
        low, high = torch.cuda.Stream.priority_range() if hasattr(torch.cuda.Stream, "priority_range") \
            else (0, -1)
        fwd = torch.cuda.Stream(priority=high if prio else 0)
        cp = torch.cuda.Stream(priority=low if prio else 0)
    slots = [{f: torch.empty_like(getattr(rig.epilogue.read_accept(rig.bs), f), device="cpu",
                                  pin_memory=not cpu) for f in names} for _ in range(DEPTH + 3)]
    if backlog and not cpu:
        back_src = torch.ones(BACKLOG_BYTES // 4, dtype=torch.float32, device=rig.device)
        back_dst = torch.empty(BACKLOG_BYTES // 4, dtype=torch.float32, pin_memory=True)
    counts = {"before": [0, 0, 0], "after": [0, 0, 0]}  # steps, mismatches, equal to next step's
    per_field = collections.Counter()
    pending: collections.deque = collections.deque()
    to_copy: list = []

    def check(job):
        i, _outs, slot, done = job
        if done is not None:
            done.synchronize()
        want, nxt = rig.expected(i), rig.expected(i + 1)
        bad = [f for f in names if not torch.equal(slot[f], want[f].to(slot[f].dtype))]
        half = counts["after" if switch_at is not None and i >= switch_at else "before"]
        half[0] += 1
        if bad:
            half[1] += 1
            per_field.update(bad)
            if all(torch.equal(slot[f], nxt[f].to(slot[f].dtype)) for f in bad):
                half[2] += 1

    def enqueue_copy(job):
        i, outs, verified = job
        slot = slots[i % len(slots)]
        if cpu:
            for f in names:
                slot[f].copy_(getattr(outs, f))
            pending.append((i, outs, slot, None))
            return
        with torch.cuda.stream(cp):
            cp.wait_event(verified)
            if backlog:
                back_dst.copy_(back_src, non_blocking=True)
            for f in names:
                slot[f].copy_(getattr(outs, f), non_blocking=True)
            done = torch.cuda.Event()
            done.record(cp)
        pending.append((i, outs, slot, done))

    kwargs = rig.folded_kwargs()
    ctx = (lambda: torch.cuda.stream(fwd)) if not cpu else None
    for i in range(steps):
        if switch_at is not None and i == switch_at:
            switch()
        if cpu:
            rig.load(i % PATTERNS, i)
            rig.replay()
            outs = accept(rig.executor, **kwargs)
            verified = None
        else:
            with ctx():
                rig.load(i % PATTERNS, i)
                rig.replay()
                outs = accept(rig.executor, **kwargs)
                verified = torch.cuda.Event()
                verified.record(fwd)
        job = (i, outs, verified)
        if late or cpu:  # the previous step's copy is enqueued after this step's replay
            if to_copy:
                enqueue_copy(to_copy.pop())
            to_copy.append(job)
        else:
            enqueue_copy(job)
        while len(pending) > DEPTH:
            check(pending.popleft())
    if to_copy:
        enqueue_copy(to_copy.pop())
    while pending:
        check(pending.popleft())
    if not cpu:
        torch.cuda.synchronize()
    out = {k: dict(zip(("steps", "mismatches", "next"), v)) for k, v in counts.items()}
    out["fields"] = dict(per_field)
    return out


# ------------------------------------------------------------------------------ children
def write_settings(on: bool) -> Path:
    path = Path(tempfile.mkdtemp(prefix="gpu_fence_")) / "settings.toml"
    path.write_text(f"[default]\n{FEATURE} = {'true' if on else 'false'}\nstrict = true\n")
    return path


def state_of(rt) -> dict:
    st = {s.name: s for s in rt.states()}[FEATURE]
    return {"state": str(st.state), "patches": list(st.patches), "detail": st.detail}


def child(scenario: str, kind: str, steps: int, quick: bool, device: str) -> dict:
    import torch
    result: dict = {"scenario": scenario, "target": kind}
    rt = None
    if scenario in ("armed", "live"):
        from dsv41_flags import activate
        rt = activate(settings_files=[write_settings(scenario == "armed")])
    dv = load_target(kind)
    if scenario == "cost":
        return cost(dv, kind, quick, device)
    if rt is not None:
        result["framework"] = state_of(rt)
    tp_group = tp_group_or_none(kind)
    weight = (torch.randn((HIDDEN, VOCAB), device=device, dtype=torch.bfloat16) * 0.02
              if device != "cpu" else None)  # the CPU dry run has only the "none" prologue
    accept = engine_call
    variants = VARIANTS if device != "cpu" else (VARIANTS[4],)
    rigs: dict[str, Rig] = {}
    result["variants"] = {}
    for name, prologue, backlog, prio, late in variants:
        rig = rigs.get(prologue)
        if rig is None:
            rig = rigs[prologue] = Rig(dv, kind, RACE_BS, prologue, device, tp_group, weight)
            rig.make_patterns(steps + 1)
            rig.capture()
        t0 = time.perf_counter()
        if scenario == "live":
            def switch_on():
                rt.switch(FEATURE, "on", requested_by="bench/gpu_fence")
            got = race(rig, steps, backlog=backlog, prio=prio, late=late, accept=accept,
                       switch_at=steps // 2, switch=switch_on)
            got["state_after"] = state_of(rt)["state"]
            rt.switch(FEATURE, "off", requested_by="bench/gpu_fence")
        else:
            got = race(rig, steps, backlog=backlog, prio=prio, late=late, accept=accept)
        got["seconds"] = round(time.perf_counter() - t0, 2)
        result["variants"][name] = got
        print(f"  {scenario:5} {name:22} {got}", file=sys.stderr, flush=True)
    return result


def engine_call(executor, **kwargs):
    """``accept_and_finalize`` as the DSpark worker calls it: looked up on the class at each call,
    so a patch installed (or switched) meanwhile is the one that runs."""
    return executor.accept_and_finalize(**kwargs)


def cost(dv, kind: str, quick: bool, device: str) -> dict:
    """Forward-stream time (CUDA events) and host wall time per step, per batch size and
    prologue: the original called directly, the framework's wrapper switched on (the fence), and
    bypassed; alternating rounds."""
    import torch

    from dsv41_flags import activate
    original = dv.TargetVerifyExecutor.__dict__["accept_and_finalize"]
    rt = activate(settings_files=[write_settings(True)])  # target imported: installs at once
    framework = state_of(rt)
    tp_group = tp_group_or_none(kind)
    weight = torch.randn((HIDDEN, VOCAB), device=device, dtype=torch.bfloat16) * 0.02
    rounds, per_round = (3, 100) if quick else (5, 200)
    plain = lambda ex, **kw: original(ex, **kw)  # noqa: E731
    wrapped = engine_call
    out: dict = {"scenario": "cost", "target": kind, "framework": framework, "rounds": rounds,
                 "steps_per_round": per_round, "sizes": {}}
    names = ("plain", "fence", "bypassed")
    for prologue in ("lm_head", "none"):
        for bs in BATCH_SIZES:
            rig = Rig(dv, kind, bs, prologue, device, tp_group, weight)
            rig.make_patterns(per_round + 1)
            rig.capture()
            fwd = torch.cuda.Stream()
            cp = torch.cuda.Stream()
            slots = {f: torch.empty_like(getattr(rig.epilogue.read_accept(bs), f), device="cpu",
                                         pin_memory=True) for f in fields()}
            gpu = {n: [] for n in names}
            wall = {n: [] for n in names}

            def measure(fn):
                starts = [torch.cuda.Event(enable_timing=True) for _ in range(per_round)]
                ends = [torch.cuda.Event(enable_timing=True) for _ in range(per_round)]
                held = collections.deque()
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for i in range(per_round):
                    with torch.cuda.stream(fwd):
                        starts[i].record(fwd)
                        rig.load(i % PATTERNS, i)
                        rig.replay()
                        outs = fn(rig.executor, **rig.folded_kwargs())
                        ends[i].record(fwd)
                    with torch.cuda.stream(cp):
                        cp.wait_event(ends[i])
                        for f, dst in slots.items():
                            dst.copy_(getattr(outs, f), non_blocking=True)
                        done = torch.cuda.Event()
                        done.record(cp)
                    held.append((outs, done))
                    while len(held) > DEPTH:
                        held.popleft()[1].synchronize()
                torch.cuda.synchronize()
                host = (time.perf_counter() - t0) / per_round * 1e6
                per_step = sorted(s.elapsed_time(e) * 1000 for s, e in zip(starts, ends))
                return statistics.median(per_step), host

            for _ in range(2):  # warm-up: both paths, both gate values
                measure(plain)
                measure(wrapped)
            for r in range(rounds):
                order = names[r % 3:] + names[:r % 3]
                for n in order:
                    if n == "bypassed":
                        rt.switch(FEATURE, "off", requested_by="bench/gpu_fence")
                    g, w = measure(plain if n == "plain" else wrapped)
                    if n == "bypassed":
                        rt.switch(FEATURE, "on", requested_by="bench/gpu_fence")
                    gpu[n].append(g)
                    wall[n].append(w)
            out["sizes"][f"{prologue}/{bs}"] = {"gpu_us": gpu, "wall_us": wall}
            print(f"  cost {prologue}/{bs}: gpu {[round(statistics.median(v), 1) for v in gpu.values()]} "
                  f"wall {[round(statistics.median(v), 1) for v in wall.values()]}",
                  file=sys.stderr, flush=True)
    return out


def probe(device: str) -> dict:
    """Whether the real target imports and its epilogue captures here; else the stopping line."""
    import torch
    info: dict = {}
    try:
        dv = load_target("real")
    except BaseException as exc:  # noqa: BLE001 - any failure of the engine's import is reported
        return {"target": "reproduction", "stopped_at": stop_line(exc), "stage": "import"}
    info["module_file"] = getattr(dv, "__file__", "")
    try:
        rig = Rig(dv, "real", 8, "none", device, tp_group_or_none("real"))
        rig.make_patterns(4)
        rig.capture()
        rig.load(1, 1)
        rig.replay()
        if device != "cpu":
            torch.cuda.synchronize()
        got = rig.executor.accept_and_finalize(**rig.folded_kwargs())
        want = rig.expected(1)
        assert all(torch.equal(getattr(got, f).cpu(), want[f].to(getattr(got, f).dtype))
                   for f in fields()), "the captured epilogue's replay does not give the eager outcome"
    except BaseException as exc:  # noqa: BLE001
        return {"target": "reproduction", "stopped_at": stop_line(exc), "stage": "capture", **info}
    return {"target": "real", **info}


# ------------------------------------------------------------------------------ parent
def machine() -> dict:
    import importlib.metadata as md

    import torch

    def version(dist):
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            return "-"
    info = {"python": platform.python_version(), "torch": torch.__version__,
            "cuda": torch.version.cuda, "sglang": version("sglang"), "triton": version("triton"),
            "dsv41_flags": version("dsv41-flags"), "commit": os.environ.get("GPU_FENCE_COMMIT", "")}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        try:
            info["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            info["driver"] = "-"
    return info


def spawn(args: list[str]) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSV41_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src")] + [
        p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as fh:
        tmp = fh.name
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), *args, "--child-out", tmp],
                          env=env, cwd=REPO, text=True, stdout=sys.stderr, stderr=sys.stderr)
    try:
        if proc.returncode != 0:
            return {"error": f"child {' '.join(args)} exited {proc.returncode} (its stderr is above)"}
        return json.loads(Path(tmp).read_text())
    finally:
        Path(tmp).unlink(missing_ok=True)


def ratio_rows(costs: dict) -> list[dict]:
    rows = []
    for key, block in costs["sizes"].items():
        for what in ("gpu_us", "wall_us"):
            m = block[what]
            for n in ("fence", "bypassed"):
                ratios = [a / b for a, b in zip(m[n], m["plain"])]
                added = [a - b for a, b in zip(m[n], m["plain"])]
                rows.append({"size": key, "measure": what, "variant": n,
                             "plain_us": round(statistics.median(m["plain"]), 2),
                             "value_us": round(statistics.median(m[n]), 2),
                             "added_us": round(statistics.median(added), 2),
                             "ratio": round(statistics.median(ratios), 4),
                             "spread": f"{min(ratios):.4f}..{max(ratios):.4f}"})
    return rows


def markdown(res: dict) -> str:
    m, p = res["machine"], res["probe"]
    target = "real sglang module" if p["target"] == "real" else (
        f"REPRODUCTION (the real module stopped at {p.get('stage')}: `{p.get('stopped_at')}`)")
    out = [f"Machine: {m.get('gpu', '-')}, driver {m.get('driver', '-')}; Python {m['python']}, "
           f"torch {m['torch']} (CUDA {m['cuda']}), triton {m['triton']}, sglang {m['sglang']}; "
           f"commit {m.get('commit') or '-'}. Target: {target}. {res['steps']} steps per run, "
           f"bs {RACE_BS}.", "",
           "| variant | (a) no feature: mismatches (next step's) | (b) armed + installed | "
           "(c) live: bypassed | (c) live: after switch on |", "|---|---|---|---|---|"]
    sc = res["scenarios"]
    for key, val in list(sc.items()) + [("cost", res.get("cost", {}))]:
        if "error" in val:
            out.insert(2, f"**{key}: {val['error']}**\n")
    sc = {k: v if "variants" in v else {"variants": {}} for k, v in sc.items()}
    for name, *_ in VARIANTS:
        if not all(name in sc[k]["variants"] for k in ("none", "armed", "live")):
            continue
        a = sc["none"]["variants"][name]["before"]
        b = sc["armed"]["variants"][name]["before"]
        c = sc["live"]["variants"][name]
        cell = lambda d: f"{d['mismatches']} / {d['steps']} ({d['next']})"  # noqa: E731
        out.append(f"| {name} | {cell(a)} | {cell(b)} | {cell(c['before'])} | {cell(c['after'])} |")
    out += ["", f"Framework states: armed `{sc['armed'].get('framework', {}).get('state')}`, "
                f"live at boot `{sc['live'].get('framework', {}).get('state')}`.", ""]
    if "sizes" in res.get("cost", {}):
        c = res["cost"]
        out += [f"Cost ({c['rounds']} rounds x {c['steps_per_round']} steps, medians of per-round "
                f"ratios against the original method called directly; `gpu`: forward-stream time per "
                f"step by CUDA events, `wall`: host time per step):", "",
                "| prologue/bs | measure | plain us | fence us | fence added us | fence ratio (spread) "
                "| bypassed ratio (spread) |", "|---|---|---|---|---|---|---|"]
        rows = ratio_rows(c)
        for key in c["sizes"]:
            for what in ("gpu_us", "wall_us"):
                f = next(r for r in rows if r["size"] == key and r["measure"] == what and r["variant"] == "fence")
                b = next(r for r in rows if r["size"] == key and r["measure"] == what and r["variant"] == "bypassed")
                out.append(f"| {key} | {what[:-3]} | {f['plain_us']} | {f['value_us']} | {f['added_us']} | "
                           f"x{f['ratio']} ({f['spread']}) | x{b['ratio']} ({b['spread']}) |")
    return "\n".join(out) + "\n"


def run(quick: bool, steps: int | None = None, device: str = "cuda",
        reproduction: bool = False, progress: Path | None = None) -> dict:
    """The whole benchmark (probe, three race scenarios, cost); ``{"skipped": why}`` without a
    GPU (unless ``device`` is "cpu": a dry run of the race logic, no timing). After each child
    the result so far is written to ``progress`` (JSON) when given."""
    why = skip_reason() if device != "cpu" else None
    if why:
        return {"skipped": why, "rows": [], "details": {}}
    steps = steps or (2000 if quick else 10000)
    res: dict = {"machine": machine(), "steps": steps, "quick": quick}
    res["probe"] = ({"target": "reproduction", "stopped_at": "not tried (--reproduction)",
                     "stage": "-"} if reproduction else spawn(["--child", "probe", "--device", device]))
    kind = res["probe"].get("target", "reproduction")
    save = (lambda: progress.write_text(json.dumps(res, indent=1, default=str))) if progress else (lambda: None)  # noqa: E731
    save()
    print(f"gpu_fence: target {kind} {res['probe'].get('stopped_at', '')}", file=sys.stderr, flush=True)
    res["scenarios"] = {}
    for scenario in ("none", "armed", "live"):
        res["scenarios"][scenario] = spawn(["--child", scenario, "--target", kind, "--steps",
                                            str(steps), "--device", device] + (["--quick"] if quick else []))
        save()
    if device != "cpu":
        res["cost"] = spawn(["--child", "cost", "--target", kind, "--device", device]
                            + (["--quick"] if quick else []))
    save()
    res["markdown"] = markdown(res)
    res["rows"], res["details"] = [], {}
    return res


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench/gpu_fence.py", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="2,000 steps and fewer cost rounds")
    parser.add_argument("--steps", type=int, help="steps per race run (default 10,000)")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                        help="cpu: a dry run of the race logic and the framework paths (no timing)")
    parser.add_argument("--reproduction", action="store_true",
                        help="use the reproduction without trying the real module")
    parser.add_argument("--out", help="write the result as JSON here")
    parser.add_argument("--out-dir", help="write gpu_fence.json and gpu_fence.md here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--target", default="real", help=argparse.SUPPRESS)
    parser.add_argument("--child-out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        if args.child == "probe":
            res = probe(args.device)
        else:
            res = child(args.child, args.target, args.steps or 10000, args.quick, args.device)
        Path(args.child_out).write_text(json.dumps(res, default=str))
        return 0
    if args.out_dir:
        Path(args.out_dir).mkdir(parents=True, exist_ok=True)
    res = run(args.quick, args.steps, args.device, args.reproduction,
              Path(args.out_dir) / "gpu_fence.partial.json" if args.out_dir else None)
    text = json.dumps(res, indent=1, default=str)
    if args.out:
        Path(args.out).write_text(text)
    if args.out_dir:
        Path(args.out_dir).mkdir(parents=True, exist_ok=True)
        (Path(args.out_dir) / "gpu_fence.json").write_text(text)
        (Path(args.out_dir) / "gpu_fence.md").write_text(res.get("markdown", res.get("skipped", "")))
    if "skipped" in res:
        print(f"gpu_fence: skipped: {res['skipped']}")
        return 0
    print(res["markdown"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
