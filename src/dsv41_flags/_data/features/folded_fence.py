"""Detach folded DSpark verify results from the verify graph's persistent buffers. Default OFF.

On the folded path (all-greedy batches replayed from the verify CUDA graph),
``accept_and_finalize`` returns views of ``DsparkVerifyEpilogue``'s persistent buffers
(``out_tokens_buf``, ``commit_lens_buf``, ...). With the overlap schedule the scheduler
copies them to host on its copy stream while the next step already runs, and the next verify
replay can overwrite those buffers before the copy finishes (sglang#40919). Cloning them on the
forward stream right after the verify, before anything else is queued, gives the copy its own
memory; later replays cannot touch it. Six tensors of bs x 6 ints: negligible. Sampled batches
take the eager path, which already allocates fresh tensors, and are left alone.
"""
from dsv41_flags import Feature

#: the six AcceptOuts fields, all views of the epilogue's persistent buffers on the folded path
FIELDS = ("correct_len", "bonus", "cap_trim_lens", "commit_lens", "new_seq_lens", "out_tokens")


def install(module, ctx):
    """Wrap ``TargetVerifyExecutor.accept_and_finalize`` to clone the folded results."""
    outs_cls = module.AcceptOuts

    def make(original):
        def accept_and_finalize(self, *args, **kwargs):
            outs = original(self, *args, **kwargs)
            if not kwargs.get("folded_accept", False):
                return outs
            return outs_cls(**{f: getattr(outs, f).clone() for f in FIELDS})

        accept_and_finalize.__wrapped__ = original
        accept_and_finalize.__doc__ = original.__doc__
        accept_and_finalize.__qualname__ = original.__qualname__
        return accept_and_finalize

    ctx.patch(module.TargetVerifyExecutor, "accept_and_finalize", make)


FEATURE = Feature(
    name="folded_fence",
    target="sglang.srt.speculative.dspark_components.dspark_verify",
    install=install,
    summary="Clone folded DSpark verify results off the verify cuda graph's persistent buffers",
    requires=("TargetVerifyExecutor.accept_and_finalize(folded_accept)",
              "AcceptOuts", "DsparkVerifyEpilogue"),
    engine="sglang>=0.5.23,<0.6",
    # cloning outputs changes no tuned kernel: a boot toggling it keeps its autotune cache
    volatile=("DSV41_FOLDED_FENCE",),
    refs=("sglang#40919",),
    # switchable while serving: between two verify steps either path is correct (the clone only
    # detaches outputs); off at boot, it is installed bypassed (dsv41-flags set folded_fence=on)
    live=True,
)
