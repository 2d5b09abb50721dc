"""The CLI with a closed or broken standard stream (``CMD >&-``, ``2>&-``, a reader that quit, a
full device): no traceback, no hang; ``run`` still starts its command; a command whose stdout
could not take its output ends with status 1."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_SETTINGS

MAIN = "import sys; sys.argv[0] = 'dsv41-flags'; from dsv41_flags.cli import main; main()"
SRC = str(Path(__file__).parents[2] / "src")


@pytest.fixture
def env(tmp_path):
    e = {k: v for k, v in os.environ.items() if not k.startswith("DSV41_")}
    e.update(HOME=str(tmp_path / "home"), XDG_CACHE_HOME=str(tmp_path / "cache"),
             DSV41_SETTINGS=str(REPO_SETTINGS), TMPDIR=str(tmp_path),
             PYTHONPATH=SRC + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else ""))
    return e


def _stream(how: str, tmp_path: Path, name: str):
    """(what to pass to subprocess for the stream, shell redirection that closes it or "")."""
    if how == "closed":
        return None, f"{1 if name == 'stdout' else 2}>&-"
    if how == "full":
        return open("/dev/full", "w"), ""
    if how == "epipe":
        read, write = os.pipe()
        os.close(read)                     # the reader quit before anything was written
        return write, ""
    return open(tmp_path / f"{name}.txt", "w"), ""


def cli(env, tmp_path, *args, stdout="file", stderr="file"):
    """Run the CLI with each stream ``file`` (kept in tmp_path/<name>.txt), ``closed``, ``full``
    (/dev/full) or ``epipe``; returns (exit status, stderr text when kept)."""
    out, close_out = _stream(stdout, tmp_path, "stdout")
    err, close_err = _stream(stderr, tmp_path, "stderr")
    shell = f'exec "$@" {close_out} {close_err}'
    try:
        proc = subprocess.run(["sh", "-c", shell, "sh", sys.executable, "-c", MAIN, *args],
                              env=env, cwd=tmp_path, stdin=subprocess.DEVNULL,
                              stdout=out, stderr=err, timeout=120)
    finally:
        for stream in (out, err):
            if isinstance(stream, int):
                os.close(stream)
            elif stream is not None:
                stream.close()
    text = (tmp_path / "stderr.txt").read_text() if stderr == "file" else ""
    return proc.returncode, text


BROKEN = [("closed", "file"), ("file", "closed"), ("closed", "closed"), ("full", "file"),
          ("file", "full"), ("epipe", "file"), ("file", "epipe")]
IDS = ["stdout-closed", "stderr-closed", "both-closed", "stdout-full", "stderr-full",
       "stdout-epipe", "stderr-epipe"]


@pytest.mark.parametrize("stdout,stderr", BROKEN, ids=IDS)
def test_run_starts_its_command_whatever_state_its_streams_are_in(env, tmp_path, stdout, stderr):
    marker = tmp_path / "ran"
    code, text = cli(env, tmp_path, "run", "--", "sh", "-c", f"echo ran > {marker}",
                     stdout=stdout, stderr=stderr)
    assert marker.read_text() == "ran\n"
    assert code == 0 and "Traceback" not in text


CASES = ([(["status"], *b) for b in BROKEN] + [(["status", "--json"], *b) for b in BROKEN]
         + [(args, *b) for args in (["validate"], ["status", "--bogus"], ["status", "--json", "--bogus"])
            for b in (("full", "file"), ("file", "closed"))])


@pytest.mark.parametrize("args,stdout,stderr", CASES,
                         ids=[f"{' '.join(a)}-{o}-{e}" for a, o, e in CASES])
def test_a_command_with_a_closed_or_broken_stream_shows_no_traceback(env, tmp_path, args, stdout, stderr):
    code, text = cli(env, tmp_path, *args, stdout=stdout, stderr=stderr)
    assert "Traceback" not in text and "Exception ignored" not in text
    if "--bogus" in args:
        assert code == 2
    elif stdout in ("full", "epipe"):
        assert code == 1, "the output was lost: not a clean exit"
    else:
        assert code == 0
