"""Cap every request's ``max_new_tokens`` in the scheduler: a live feature whose effect a client
sees (``completion_tokens`` in ``/generate``'s answer), for trying a live switch
(docs/quickstart.md). Default OFF."""
from dsv41_flags import Feature, Option


def install(module, ctx):
    """Wrap ``Scheduler.init_req_max_new_tokens`` (each new request's budget, on every rank)."""
    cap = ctx.options["cap"]

    def make(original):
        def init_req_max_new_tokens(self, req):
            asked = req.sampling_params.max_new_tokens
            if asked is None or asked > cap:
                req.sampling_params.max_new_tokens = cap
            return original(self, req)
        return init_req_max_new_tokens

    ctx.patch(module.Scheduler, "init_req_max_new_tokens", make)


FEATURE = Feature(
    name="max_new_tokens_cap",
    target="sglang.srt.managers.scheduler",
    install=install,
    summary="Cap each request's max_new_tokens in the scheduler (a visible live switch)",
    requires=("Scheduler.init_req_max_new_tokens(req)",),
    options=(Option("cap", "int", 2, minimum=1, maximum=1 << 20,
                    help="the most tokens a request may generate while the feature is on"),),
    volatile=("DSV41_MAX_NEW_TOKENS_CAP",),
    live=True,
)
