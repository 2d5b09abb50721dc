"""A call that must not block: ``no_block(fn, *args, **kwargs)`` runs it under a 10 s alarm and
raises TimeoutError instead of hanging."""


def no_block(fn, *args, **kwargs):
    """Run ``fn`` in a subprocess-free way but fail fast instead of hanging: an alarm."""
    import signal

    def boom(*_):
        raise TimeoutError("blocked")

    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(10)
    try:
        return fn(*args, **kwargs)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
