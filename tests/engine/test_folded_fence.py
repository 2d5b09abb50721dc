"""folded_fence on the real ``sglang.srt.speculative.dspark_components.dspark_verify`` (CPU).

A real ``DsparkVerifyEpilogue`` sits behind a real ``TargetVerifyExecutor``; its persistent accept
buffers are written by the epilogue's own ``capture_hook`` - the code the verify CUDA graph records
and every replay re-runs - so a second ``capture_hook`` call is a second verify replay on CPU.
The executor's ``tp_sync`` is a real ``SpecTpSync`` over a real sglang ``GroupCoordinator`` (gloo,
world size 1). Only two collaborator *arguments* are plain objects, because their real classes
need a loaded model or CUDA: the executor's ``target_worker`` (read for
``model_runner.model_config.hf_text_config.model_type``) and the cuda-graph ``runner`` handed to
``capture_hook`` (read for ``model_runner.is_draft_worker`` and ``ragged_verify_mode``).

Hazard (sglang#40919): on the folded path ``accept_and_finalize`` returns views of the epilogue's
persistent buffers, so the next replay rewrites results the scheduler is still copying.
"""
from __future__ import annotations

import sys
import types
from datetime import timedelta

import pytest

pytestmark = pytest.mark.engine

torch = pytest.importorskip("torch")
dv = pytest.importorskip("sglang.srt.speculative.dspark_components.dspark_verify")

import torch.distributed as dist  # noqa: E402
from sglang.srt.distributed.parallel_state import GroupCoordinator  # noqa: E402
from sglang.srt.layers.logits_processor import LogitsProcessorOutput  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode  # noqa: E402
from sglang.srt.speculative.dspark_components.dspark_draft import DraftBlockResult  # noqa: E402

#: the six AcceptOuts fields and the epilogue buffer each one is read from on the folded path
BUFFERS = {"correct_len": "correct_len_buf", "bonus": "bonus_buf", "cap_trim_lens": "cap_trim_lens_buf",
           "commit_lens": "commit_lens_buf", "new_seq_lens": "new_seq_lens_buf",
           "out_tokens": "out_tokens_buf"}
FIELDS = tuple(BUFFERS)

STRIDE = 4          # verify_num_draft_tokens: the current token + gamma=3 draft tokens
GAMMA = STRIDE - 1
BS = 2
MAX_BS = 4
VOCAB = 32
FOLDED_ENV = {"DSV41_FOLDED_FENCE": "1"}

#: the pristine function, read before any runtime of this module armed anything
ORIGINAL = dv.TargetVerifyExecutor.__dict__["accept_and_finalize"]

# Two verify steps. Greedy rule: drafts are accepted while candidates[:, 1:] == argmax[:, :-1];
# the bonus is the target's argmax at the first mismatch.
STEP_A = dict(
    candidates=[[5, 6, 7, 8], [9, 10, 11, 12]],
    predict=[[6, 7, 8, 20], [10, 30, 0, 0]],
    seq_lens=[100, 200],
    expect=dict(correct_len=[3, 1], bonus=[20, 30], cap_trim_lens=[0, 0], commit_lens=[4, 2],
                new_seq_lens=[104, 202], out_tokens=[[6, 7, 8, 20], [10, 30, 12, 0]]),
)
STEP_B = dict(
    candidates=[[1, 2, 3, 4], [1, 2, 3, 4]],
    predict=[[31, 0, 0, 0], [2, 3, 25, 0]],
    seq_lens=[300, 400],
    expect=dict(correct_len=[0, 2], bonus=[31, 25], cap_trim_lens=[0, 0], commit_lens=[1, 3],
                new_seq_lens=[301, 403], out_tokens=[[31, 3, 4, 0], [2, 3, 25, 0]]),
)


def _assert_pristine():
    current = dv.TargetVerifyExecutor.__dict__["accept_and_finalize"]
    assert current is ORIGINAL, f"accept_and_finalize is patched ({current!r}): a runtime leaked"
    assert current.__module__ == dv.__name__ and not hasattr(current, "__wrapped__")


@pytest.fixture(scope="module")
def tp_group(tmp_path_factory):
    """A real sglang GroupCoordinator over a one-process gloo group (no TP broadcast sites)."""
    assert not dist.is_initialized()
    store = tmp_path_factory.mktemp("pg") / "store"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1,
                            timeout=timedelta(seconds=60))
    group = GroupCoordinator(group_ranks=[[0]], local_rank=0, torch_distributed_backend="gloo",
                             use_pynccl=False, use_mscclpp=False, use_custom_allreduce=False,
                             use_torch_symm_mem_all_reduce=False, use_hpu_communicator=False,
                             use_xpu_communicator=False, group_name="dsv41_engine_test_tp")
    yield group
    dist.destroy_process_group()


@pytest.fixture(autouse=True)
def _pristine_between_tests():
    _assert_pristine()
    yield
    # make_runtime's teardown (which runs before this one finishes) uninstalled every runtime
    _assert_pristine()


class Rig:
    """A real epilogue behind a real executor, and the calls the tests make on them."""

    def __init__(self, tp_group):
        self.tp_sync = dv.SpecTpSync(tp_group)
        assert not any(self.tp_sync.enabled(s) for s in dv.SpecTpSyncSite)  # world size 1
        self.epilogue = dv.DsparkVerifyEpilogue(max_bs=MAX_BS, verify_num_draft_tokens=STRIDE,
                                                device="cpu", tp_sync=self.tp_sync)
        # duck-typed: the real TpModelWorker needs a loaded model; only this path is read
        target_worker = types.SimpleNamespace(model_runner=types.SimpleNamespace(
            model_config=types.SimpleNamespace(hf_text_config=types.SimpleNamespace(model_type="deepseek_v41"))))
        self.executor = dv.TargetVerifyExecutor(
            target_worker=target_worker, gamma=GAMMA, verify_num_draft_tokens=STRIDE, model_runner=None,
            kv_injector=None, tp_sync=self.tp_sync, verify_epilogue=self.epilogue)
        # duck-typed: a CudaGraphRunner needs CUDA; capture_hook reads these two attributes
        self.graph_runner = types.SimpleNamespace(model_runner=types.SimpleNamespace(is_draft_worker=False),
                                                  ragged_verify_mode=False)

    def buffer(self, field):
        return getattr(self.epilogue, BUFFERS[field])

    def replay(self, step):
        """One static verify step: the epilogue's in-graph accept writes its persistent buffers."""
        candidates = torch.tensor(step["candidates"], dtype=torch.int64)
        predict = torch.tensor(step["predict"], dtype=torch.int64)
        logits = torch.nn.functional.one_hot(predict.view(-1), VOCAB).to(torch.float32) * 10.0
        n = BS * STRIDE
        forward_batch = ForwardBatch(
            forward_mode=ForwardMode.TARGET_VERIFY, batch_size=BS, input_ids=candidates.view(-1),
            req_pool_indices=torch.arange(1, BS + 1), seq_lens=torch.tensor(step["seq_lens"]),
            out_cache_loc=torch.arange(n), seq_lens_sum=sum(step["seq_lens"]), positions=torch.arange(n))
        out = LogitsProcessorOutput(next_token_logits=logits, hidden_states=torch.zeros(n, 8))
        self.epilogue.begin_static_step(BS, armed=False)
        self.epilogue.capture_hook(self.graph_runner, out, forward_batch, n)

    def folded(self):
        """The folded read, as the DSpark worker calls it after a replay (other inputs unused)."""
        return self.executor.accept_and_finalize(
            folded_accept=True, bs=BS, verify_ids_2d=None, target_logits=None, draft_block=None,
            sampling_info=None, draft_input=None, layout=None, prefix_lens=None, draft_tokens=None)

    def eager_kwargs(self, step):
        """Inputs of the eager (sampled-batch) path; sampling_info=None is the greedy accept."""
        candidates = torch.tensor(step["candidates"], dtype=torch.int64)
        predict = torch.tensor(step["predict"], dtype=torch.int64)
        logits = torch.nn.functional.one_hot(predict.view(-1), VOCAB).to(torch.float32) * 10.0
        drafts = candidates[:, 1:].contiguous()
        block = DraftBlockResult(draft_tokens=drafts, corrected_logits=None,
                                 greedy_mask=torch.ones(BS, dtype=torch.bool),
                                 temperatures=torch.zeros(BS), greedy_draft=True)
        return dict(folded_accept=False, bs=BS, verify_ids_2d=candidates, target_logits=logits,
                    draft_block=block, sampling_info=None, draft_input=None, layout=None,
                    prefix_lens=torch.tensor(step["seq_lens"]), draft_tokens=drafts)

    def overwrite_buffers(self, value=-7):
        for field in FIELDS:
            self.buffer(field).fill_(value)


def _values(outs):
    return {f: getattr(outs, f).tolist() for f in FIELDS}


def _shares_storage(t, buf):
    return t.untyped_storage().data_ptr() == buf.untyped_storage().data_ptr()


@pytest.fixture
def rig(tp_group):
    return Rig(tp_group)


def _feature(rt):
    return rt.features["folded_fence"]


# ------------------------------------------------------------------------------------ tests
def test_flag_off_installs_bypassed_and_the_folded_results_alias_the_buffers(make_runtime, rig):
    """folded_fence is live: off at boot, its patch is in place but bypassed, and the
    engine behaves exactly as unpatched."""
    rt = make_runtime(env={})
    rt.arm()
    assert {s.name: s.state for s in rt.states()}["folded_fence"] == "bypassed"
    wrapper = dv.TargetVerifyExecutor.__dict__["accept_and_finalize"]
    assert wrapper.__wrapped__ is ORIGINAL and wrapper.__dsv41_gate__.on is False

    rig.replay(STEP_A)
    outs = rig.folded()
    assert isinstance(outs, dv.AcceptOuts)
    assert _values(outs) == STEP_A["expect"]
    for field in FIELDS:
        assert _shares_storage(getattr(outs, field), rig.buffer(field)), field

    # the next verify replay rewrites what the previous step returned (sglang#40919) ...
    rig.replay(STEP_B)
    assert _values(outs) == STEP_B["expect"]
    # ... and so does any write to the buffers, in all six fields
    rig.overwrite_buffers(-7)
    for field in FIELDS:
        assert set(getattr(outs, field).view(-1).tolist()) == {-7}, field


def test_fence_installed_detaches_the_folded_results(make_runtime, rig):
    rt = make_runtime(env=FOLDED_ENV)
    assert "dspark_verify" in dv.__name__ and dv.__name__ in sys.modules
    rt.arm()  # the target is imported: the post-import hook installs at once
    state = {s.name: s for s in rt.states()}["folded_fence"]
    assert state.state == "installed", state
    assert state.patches == ("TargetVerifyExecutor.accept_and_finalize",)
    wrapper = dv.TargetVerifyExecutor.__dict__["accept_and_finalize"]
    assert wrapper is not ORIGINAL and wrapper.__wrapped__ is ORIGINAL

    rig.replay(STEP_A)
    outs = rig.folded()
    assert isinstance(outs, dv.AcceptOuts)
    assert _values(outs) == STEP_A["expect"]
    every_buffer = [v for v in vars(rig.epilogue).values() if isinstance(v, torch.Tensor)]
    for field in FIELDS:
        t = getattr(outs, field)
        assert t.dtype == rig.buffer(field).dtype and t.shape == rig.buffer(field)[:BS].shape, field
        assert not any(_shares_storage(t, buf) for buf in every_buffer), field

    rig.replay(STEP_B)
    assert _values(rig.epilogue.read_accept(BS)) == STEP_B["expect"]  # the buffers did change
    assert _values(outs) == STEP_A["expect"]
    rig.overwrite_buffers(-7)
    assert _values(outs) == STEP_A["expect"]

    # the next step's read is fenced too, and is B's
    rig.replay(STEP_B)
    outs_b = rig.folded()
    assert _values(outs_b) == STEP_B["expect"]
    for field in FIELDS:
        assert not _shares_storage(getattr(outs_b, field), rig.buffer(field))
        assert not _shares_storage(getattr(outs_b, field), getattr(outs, field))


def test_install_twice_leaves_one_wrapper_level(make_runtime, rig):
    rt = make_runtime(env=FOLDED_ENV)
    rt.arm()
    first = dv.TargetVerifyExecutor.__dict__["accept_and_finalize"]
    assert first.__wrapped__ is ORIGINAL

    # the same runtime installs again (a second post-import hook firing, a re-arm)
    assert rt.install(_feature(rt), dv).state == "installed"
    again = dv.TargetVerifyExecutor.__dict__["accept_and_finalize"]
    assert again.__wrapped__ is ORIGINAL
    assert len(rt.ledger.stack(dv.TargetVerifyExecutor, "accept_and_finalize")) == 1
    rt.arm()  # arming again registers nothing new
    assert dv.TargetVerifyExecutor.__dict__["accept_and_finalize"] is again

    # a second runtime of the same process arms the same feature
    rt2 = make_runtime(env=FOLDED_ENV)
    rt2.arm()
    top = dv.TargetVerifyExecutor.__dict__["accept_and_finalize"]
    assert top.__wrapped__ is ORIGINAL, "a second runtime wrapped the wrapper"

    # one level means one clone: the result still holds step A after the buffers moved on
    rig.replay(STEP_A)
    outs = rig.folded()
    rig.replay(STEP_B)
    assert _values(outs) == STEP_A["expect"]


def test_uninstall_restores_the_original(make_runtime, rig):
    rt = make_runtime(env=FOLDED_ENV)
    rt.arm()
    assert dv.TargetVerifyExecutor.__dict__["accept_and_finalize"] is not ORIGINAL
    rt.uninstall()
    _assert_pristine()
    assert {s.name: s.state for s in rt.states()}["folded_fence"] == "uninstalled"
    assert rt.ledger.records("folded_fence") == []

    # and the hazard is back: the folded read aliases the buffers again
    rig.replay(STEP_A)
    outs = rig.folded()
    rig.replay(STEP_B)
    assert _values(outs) == STEP_B["expect"]


def test_eager_path_result_is_returned_unchanged(make_runtime, rig):
    """The eager path runs for real (greedy accept on CPU). The wrapper must hand back the very
    object the original returned: the profiler hook below only observes the original's frame
    (its ``return`` event carries the returned object); nothing is replaced."""
    rt = make_runtime(env=FOLDED_ENV)
    rt.arm()
    assert dv.TargetVerifyExecutor.__dict__["accept_and_finalize"] is not ORIGINAL

    returned = []

    def observe(frame, event, arg):
        if event == "return" and frame.f_code is ORIGINAL.__code__:
            returned.append(arg)

    kwargs = rig.eager_kwargs(STEP_A)
    previous = sys.getprofile()
    sys.setprofile(observe)
    try:
        outs = rig.executor.accept_and_finalize(**kwargs)
    finally:
        sys.setprofile(previous)

    assert len(returned) == 1, "the original ran once"
    assert outs is returned[0]
    assert isinstance(outs, dv.AcceptOuts)
    assert _values(outs) == STEP_A["expect"]
    # fresh tensors of the eager kernels, not the epilogue's buffers
    for field in FIELDS:
        assert not _shares_storage(getattr(outs, field), rig.buffer(field)), field

    # and the folded path of the same installed wrapper does clone (so the branch is the flag)
    returned.clear()
    rig.replay(STEP_B)
    sys.setprofile(observe)
    try:
        folded = rig.folded()
    finally:
        sys.setprofile(previous)
    assert len(returned) == 1 and folded is not returned[0]
    assert _values(folded) == _values(returned[0]) == STEP_B["expect"]


def test_live_switch_changes_the_next_folded_read_without_re_patching(make_runtime, rig):
    """On the real target: switched on while 'serving', the very next folded read is
    detached from the verify buffers; switched off, the next one aliases them again."""
    rt = make_runtime(env={})
    rt.arm()
    wrapper = dv.TargetVerifyExecutor.__dict__["accept_and_finalize"]
    rig.replay(STEP_A)
    before = rig.folded()
    assert _shares_storage(before.out_tokens, rig.buffer("out_tokens"))

    toggle = rt.switch("folded_fence", "on", requested_by="test")
    assert (toggle.old, toggle.new, toggle.generation) == (False, True, 1)
    assert dv.TargetVerifyExecutor.__dict__["accept_and_finalize"] is wrapper   # no re-patch
    outs = rig.folded()
    assert _values(outs) == STEP_A["expect"]
    for field in FIELDS:
        assert not _shares_storage(getattr(outs, field), rig.buffer(field)), field
    rig.replay(STEP_B)
    assert _values(outs) == STEP_A["expect"]          # the fence held across the next replay
    assert {s.name: s.state for s in rt.states()}["folded_fence"] == "installed"

    rt.switch("folded_fence", False, requested_by="test")
    again = rig.folded()
    assert _shares_storage(again.out_tokens, rig.buffer("out_tokens"))
    assert {s.name: s.state for s in rt.states()}["folded_fence"] == "bypassed"
    assert rt.live.generation == 2
