"""The CLI with a closed or broken standard stream (``CMD >&-``, ``2>&-``, a reader that quit, a
full device): no traceback, no hang; ``run`` still starts its command; a command whose own output
could not be written ends with status 74 (EX_IOERR) and says so on stderr when it can."""
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
         + [(["check", "--json"], *b) for b in BROKEN]
         + [(args, *b) for args in (["validate"], ["status", "--bogus"], ["status", "--json", "--bogus"])
            for b in (("full", "file"), ("file", "closed"))])


@pytest.mark.parametrize("args,stdout,stderr", CASES,
                         ids=[f"{' '.join(a)}-{o}-{e}" for a, o, e in CASES])
def test_output_that_cannot_be_written_is_exit_74_and_one_line_on_stderr(env, tmp_path, args,
                                                                          stdout, stderr):
    """Every failed write of the CLI's own output (stdout closed, full, a reader that quit) is
    exit 74 (EX_IOERR), said in one line on stderr when stderr can take it; a stream the command
    never writes to is no failure (``status`` writes nothing on stderr); never a traceback."""
    code, text = cli(env, tmp_path, *args, stdout=stdout, stderr=stderr)
    assert "Traceback" not in text and "Exception ignored" not in text
    writes_stderr = "--bogus" in args and "--json" not in args  # the usage error, as text
    writes_stdout = "--bogus" not in args or "--json" in args
    if (stdout != "file" and writes_stdout) or (stderr != "file" and writes_stderr):
        assert code == 74, "the output was lost: not a clean exit"
        if stderr == "file":
            why = {"closed": "stdout is closed", "full": "No space left on device",
                   "epipe": "Broken pipe"}[stdout]
            assert text.splitlines()[-1] == \
                f"error: the output could not be written to stdout ({why}): exit 74"
    else:
        assert code == (2 if "--bogus" in args else 0), text
        assert "could not be written" not in text


@pytest.mark.parametrize("args", [["status", "--json"], ["check", "--json"], ["--help"],
                                  ["explain", "folded_fence"]])
@pytest.mark.parametrize("redirect,why", [(">&-", "stdout is closed"),
                                          (">/dev/full", "No space left on device"),
                                          ("1</dev/null", "Bad file descriptor")])
def test_the_operators_own_shell_line_sees_the_failure(env, tmp_path, args, redirect, why):
    """As an operator types it: ``status --json >&-``, ``status >/dev/full``, a stdout opened
    read-only (EBADF). (A reader that quit: ``epipe`` above, its read end closed before the
    command starts, so no race with the reader.)"""
    line = f'"$@" {" ".join(args)} {redirect}; echo "rc=${{PIPESTATUS[0]}}" >&2'
    proc = subprocess.run(["bash", "-c", line, "bash", sys.executable, "-c", MAIN], env=env,
                          cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=120)
    assert proc.stderr.splitlines() == [
        f"error: the output could not be written to stdout ({why}): exit 74", "rc=74"]


def test_stderr_that_cannot_take_a_message_is_exit_74(env, tmp_path):
    """A command that has something to say on stderr (a settings error) and cannot: exit 74,
    not the 1 of the error it could not report."""
    bad = tmp_path / "bad.toml"
    bad.write_text("[default]\nfolded_fence = 'maybe'\n")
    code, _ = cli(env, tmp_path, "status", "-s", str(bad), stdout="file", stderr="full")
    assert code == 74
    code, text = cli(env, tmp_path, "status", "-s", str(bad))
    assert code == 1 and "error:" in text
