"""Secrets are never kept: a launch option or variable whose name marks a secret (the rule of
``secrecy.is_secret``: the core's secret names, the engine adapter's, the settings'
``secret_names``) never enters the fingerprint, and its value is written nowhere: not in the
sidecar, the snapshot, the events, ``fingerprint --explain``, ``status``, ``explain``, ``--json``
or an error. Where a value must be shown it is ``***``."""
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dsv41_flags.engine import EngineFacts
from dsv41_flags.fingerprint import compute
from dsv41_flags.secrecy import CORE_SECRETS, MASK, is_secret, name_parts, secret_names

from ..conftest import REPO_SETTINGS

def sglang_facts():
    from dsv41_flags.engines.sglang import FINGERPRINT

    return FINGERPRINT


SECRET = ["--api-key", "--admin-api-key", "--ssl-keyfile-password", "--api-key-file",
          "SGLANG_HF_TOKEN", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "WANDB_API_KEY",
          "OPENAI_APIKEY", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "SGLANG_AUTH_TOKEN",
          "DSV41_API_KEY", "NCCL_SOME_PASSWORD", "db.Password", "MY_CREDENTIALS",
          "SGLANG_API_TOKEN", "--Api-Key"]
NOT_SECRET = ["--kv-cache-dtype", "--key-dtype", "SGLANG_USE_AITER_FP8_PER_TOKEN",
              "SGLANG_LOG_DECODE_GRAPH_KEY", "--max-total-tokens", "--skip-tokenizer-init",
              "--ssl-keyfile", "--ssl-certfile", "SGLANG_INIT_NEW_TOKEN_RATIO",
              "SGLANG_KV_CANARY_ENABLE_TOKEN_ORACLE", "--tokenizer-path", "SGLANG_PASSES",
              "--speculative-token-map", "--keyboard", "SGLANG_SECRETARY", "--tp"]


@pytest.mark.parametrize("name", SECRET)
def test_names_that_mark_a_secret(name):
    assert is_secret(name, secret_names(facts=sglang_facts())).startswith("secret: the name holds")


@pytest.mark.parametrize("name", NOT_SECRET)
def test_names_that_mark_no_secret(name):
    """A bare key or token names a kernel setting in an inference engine: it stays in the
    fingerprint; a secret name matches whole parts only (SECRETARY is no SECRET)."""
    assert is_secret(name, secret_names(facts=sglang_facts())) == ""


def test_every_sglang_option_that_holds_a_secret_is_marked():
    """The option table shipped for sglang: exactly its key and password options are secrets."""
    from dsv41_flags.engines.sglang import FINGERPRINT

    table = json.loads((Path(__file__).parents[2] / "src/dsv41_flags/_data/sglang_options.json")
                       .read_text())["options"]
    secrets = secret_names(facts=FINGERPRINT)
    assert sorted(o for o in table if is_secret(o, secrets)) == [
        "--admin-api-key", "--api-key", "--ssl-keyfile-password"]


def test_name_parts_split_on_dashes_underscores_dots_and_spaces():
    assert name_parts("--ssl-keyfile-password") == ("ssl", "keyfile", "password")
    assert name_parts("SGLANG_HF__TOKEN") == ("sglang", "hf", "token")
    assert name_parts("a.b c") == ("a", "b", "c")


def test_the_settings_add_secret_names(tmp_path):
    from dsv41_flags.assembly import resolve_launch

    s = tmp_path / "s.toml"
    s.write_text('[default]\nsecret_names = ["license-blob"]\n')
    features, resolution, _ = resolve_launch([str(s)], None)
    secrets = secret_names(resolution, facts=sglang_facts())
    assert "license-blob" in secrets and set(CORE_SECRETS) <= set(secrets)
    fp = compute(resolution, features, ["python", "-m", "sglang.launch_server", "--license-blob",
                                        "S3CRETL", "--tp", "2"],
                 {"SGLANG_LICENSE_BLOB": "S3CRETM"}, facts=sglang_facts())
    assert "S3CRET" not in json.dumps(fp.payload) + json.dumps(fp.excluded)
    assert "--license-blob" in fp.excluded and "SGLANG_LICENSE_BLOB" in fp.excluded


def test_a_secret_never_changes_the_fingerprint():
    from dsv41_flags.assembly import resolve_launch

    features, resolution, _ = resolve_launch([str(REPO_SETTINGS)], None)
    base = ["python", "-m", "sglang.launch_server", "--tp", "2"]
    one = compute(resolution, features, base + ["--api-key", "A", "--admin-api-key=B"],
                  {"SGLANG_HF_TOKEN": "C"}, facts=sglang_facts())
    two = compute(resolution, features, base + ["--api-key", "X", "--admin-api-key=Y"],
                  {"SGLANG_HF_TOKEN": "Z"}, facts=sglang_facts())
    assert one.digest == two.digest == compute(resolution, features, base, {}, facts=sglang_facts()).digest


# ------------------------------------------------------------------ end to end: grep everything
SECRETS = {"A": "S3CRETA", "B": "S3CRETB", "C": "S3CRETC", "D": "S3CRETD", "E": "S3CRETE",
           "F": "S3CRETF"}
LAUNCH = ["python", "-m", "sglang.launch_server", "--api-key", SECRETS["A"],
          f"--admin-api-key={SECRETS['B']}", "--ssl-keyfile-password", SECRETS["F"], "--tp", "2"]


@pytest.fixture
def env(tmp_path):
    e = {k: v for k, v in os.environ.items() if not k.startswith("DSV41_")}
    e.update(HOME=str(tmp_path / "home"), XDG_CACHE_HOME=str(tmp_path / "cache"),
             SGLANG_HF_TOKEN=SECRETS["C"], DSV41_API_KEY=SECRETS["D"], SGL_API_TOKEN=SECRETS["E"],
             DSV41_SETTINGS=str(REPO_SETTINGS), DSV41_LOG_FORMAT="json", TMPDIR=str(tmp_path))
    src = str(Path(__file__).parents[2] / "src")
    e["PYTHONPATH"] = src + os.pathsep + e.get("PYTHONPATH", "") if e.get("PYTHONPATH") else src
    return e


MAIN = "import sys; sys.argv[0] = 'dsv41-flags'; from dsv41_flags.cli import main; main()"


def cli(env, *args, cwd):
    return subprocess.run([sys.executable, "-c", MAIN, *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=180)


#: the options of a feature holding a password beside an ordinary setting
PASSWORD_OPTIONS = "Option('password', 'str', default=''), Option('size', 'int', default=1)"


def remote_cache_feature(tmp_path: Path, summary: str, options: str) -> Path:
    """A features directory under ``tmp_path`` with one feature ``remote_cache`` (target json,
    installs nothing) declaring ``options`` (Python source of the Option tuple's items)."""
    fdir = tmp_path / "features"
    fdir.mkdir()
    (fdir / "remote_cache.py").write_text(
        "from dsv41_flags import Feature, Option\n"
        "FEATURE = Feature(name='remote_cache', target='json', install=lambda m, c: None,\n"
        f"    summary={summary!r}, engine='',\n"
        f"    options=({options}))\n")
    return fdir


def assert_no_secret(text: str, where: str):
    found = [s for s in SECRETS.values() if s in text]
    assert not found, f"{where} holds {found}"


def test_no_secret_in_any_output_file_event_or_snapshot(env, tmp_path):
    side = tmp_path / "side.json"
    outputs = {}
    for args in (["fingerprint", "--write", str(side), "--explain", "--", *LAUNCH],
                 ["fingerprint", "--explain", "--json", "--", *LAUNCH],
                 ["fingerprint", "--diff", str(side), "--json", "--", *LAUNCH[:-2]],
                 ["fingerprint", "--diff", str(side), "--", *LAUNCH[:-2]],
                 ["status", "--", *LAUNCH], ["status", "--json", "--", *LAUNCH],
                 ["explain", "API_KEY"], ["explain", "SECRET_NAMES", "--json"],
                 ["validate", "--json"], ["check"], ["check", "--json"]):
        r = cli(env, *args, cwd=tmp_path)
        assert "Traceback" not in r.stderr, (args, r.stderr)
        outputs[" ".join(args)] = r.stdout + r.stderr
    assert "--api-key" in outputs[f"fingerprint --write {side} --explain -- {' '.join(LAUNCH)}"]
    assert side.is_file()
    # a launch under run: the child's events (stderr) and the snapshot it received
    probe = ("import os, sys\n"
             "raw = os.environ.get('DSV41_SNAPSHOT', '')\n"
             "if raw.startswith('file:'):\n"
             "    raw = open(raw[5:].split('#')[0]).read()\n"
             "print('SNAPSHOT', raw)\n")
    r = subprocess.run([sys.executable, "-c", MAIN, "run", "--", sys.executable, "-c",
                        probe, "--api-key", SECRETS["A"]], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    assert "SNAPSHOT {" in r.stdout and "flags.resolved" in r.stderr
    outputs["run"] = r.stdout + r.stderr
    for where, text in outputs.items():
        assert_no_secret(text, where)
    assert_no_secret(side.read_text(), "the sidecar")
    for path in tmp_path.rglob("*"):   # spilled snapshots, caches, anything written
        if path.is_file():
            assert_no_secret(path.read_text(errors="replace"), str(path))


def test_a_secret_option_of_a_feature_is_shown_as_the_mask(tmp_path, env):
    fdir = remote_cache_feature(tmp_path, "a cache behind a password", PASSWORD_OPTIONS)
    (tmp_path / "settings.toml").write_text(
        '[default]\nremote_cache = true\nremote_cache_password = "S3CRETA"\n')
    env = {**env, "DSV41_SETTINGS": str(tmp_path / "settings.toml"),
           "DSV41_FEATURES_DIR": str(fdir), "DSV41_REMOTE_CACHE_PASSWORD": SECRETS["B"]}
    probe = "import dsv41_flags; dsv41_flags.activate()"
    r = subprocess.run([sys.executable, "-c", probe], env=env, cwd=tmp_path, capture_output=True,
                       text=True, timeout=180)
    assert "flags.resolved" in r.stderr and MASK in r.stderr, r.stderr
    assert_no_secret(r.stdout + r.stderr, "the events")
    for args in (["status"], ["status", "--json"], ["explain", "remote_cache"],
                 ["explain", "remote_cache_password", "--json"], ["fingerprint", "--explain"],
                 ["fingerprint", "--explain", "--json"]):
        r = cli(env, *args, cwd=tmp_path)
        assert "Traceback" not in r.stderr, (args, r.stderr)
        assert_no_secret(r.stdout + r.stderr, " ".join(args))
        if args[0] != "fingerprint":
            assert MASK in r.stdout, (args, r.stdout)


SGLANG = ["python", "-m", "sglang.launch_server"]


@pytest.mark.parametrize("argv,shown", [
    (SGLANG + ["--api-key", "S", "--tp", "2"], SGLANG + ["--api-key", MASK, "--tp", "2"]),
    (SGLANG + ["--admin-api-key=S", "--port=1"], SGLANG + [f"--admin-api-key={MASK}", "--port=1"]),
    (SGLANG + ["--api-key", "--tp", "2"], SGLANG + ["--api-key", "--tp", "2"]),
    (SGLANG + ["--ssl-keyfile-password", "S", "--ssl-keyfile", "k.pem", "--base-gpu-id", "1"],
     SGLANG + ["--ssl-keyfile-password", MASK, "--ssl-keyfile", "k.pem", "--base-gpu-id", "1"]),
    # sglang's parser takes a unique prefix of an option: judged as sglang reads it
    (SGLANG + ["--admin-api", "S", "--api-ke=S", "--ssl-keyfile-pass", "S"],
     SGLANG + ["--admin-api", MASK, f"--api-ke={MASK}", "--ssl-keyfile-pass", MASK]),
    # a program whose options are not known: a possible abbreviation of a secret is masked
    (["python", "serve.py", "--admin-api", "S", "--db-pass=S", "--port", "1"],
     ["python", "serve.py", "--admin-api", MASK, f"--db-pass={MASK}", "--port", "1"]),
])
def test_a_launch_command_is_shown_without_secret_values(argv, shown):
    from dsv41_flags.fingerprint import masked_argv

    assert masked_argv(argv, secret_names(facts=sglang_facts()), sglang_facts()) == shown


@pytest.mark.parametrize("argv", [
    SGLANG + ["--admin-api", "S3CRETA", "--api-ke", "S3CRETB"],
    ["python", "serve.py", "--admin-api", "S3CRETA", "--db-pass=S3CRETB"],
])
def test_an_abbreviated_secret_option_never_enters_the_fingerprint(argv):
    from dsv41_flags.assembly import resolve_launch

    features, resolution, _ = resolve_launch([str(REPO_SETTINGS)], None)
    fp = compute(resolution, features, argv, {}, sglang_facts())
    assert "S3CRET" not in json.dumps(fp.payload) and "S3CRET" not in json.dumps(fp.excluded)


def test_the_engines_own_options_are_no_abbreviations_of_a_secret():
    from dsv41_flags.assembly import resolve_launch

    features, resolution, _ = resolve_launch([str(REPO_SETTINGS)], None)
    argv = SGLANG + ["--speculative-accept-threshold-acc", "0.5", "--enable-streaming-session",
                     "--ssl-keyfile", "k.pem"]
    fp = compute(resolution, features, argv, {}, sglang_facts())
    assert fp.payload["argv"][1:] == argv[3:], fp.payload["argv"]


def test_a_diff_against_an_old_sidecar_holding_secrets_shows_them_masked(env, tmp_path):
    side = tmp_path / "old.launch"
    side.write_text(json.dumps({"fingerprint": "0" * 64, "payload": {
        "argv": ["sglang.launch_server", "--api-key", SECRETS["A"]],
        "env": {"SGLANG_HF_TOKEN": SECRETS["C"]}, "settings": {}}}))
    for extra in ([], ["--json"]):
        r = cli(env, "fingerprint", "--diff", str(side), *extra, "--", *LAUNCH, cwd=tmp_path)
        assert r.returncode == 1, r.stderr
        assert_no_secret(r.stdout + r.stderr, "fingerprint --diff")
        assert MASK in r.stdout


def test_the_documented_secret_rule_is_the_code_s():
    from dsv41_flags.secrecy import CORE_SECRETS
    docs = Path(__file__).parents[2] / "docs"
    fingerprint_md = (docs / "fingerprint.md").read_text()
    listed = fingerprint_md.split("The framework's secret names:", 1)[1].split("\n- ", 1)[0]
    assert sorted(re.findall(r"`([a-z0-9-]+)`", listed)) == sorted(CORE_SECRETS)
    trust = (docs / "trust-and-errors.md").read_text()
    assert "secrecy.is_secret" in trust and "a bare `key`\nor `token` marks nothing" in trust
    for bare in ("key", "token"):
        assert not is_secret(bare) and not is_secret(f"SGLANG_{bare.upper()}_DTYPE")


def test_a_process_status_shows_a_secret_option_as_the_mask(tmp_path, make_runtime):
    from dsv41_flags.status import process_status
    fdir = remote_cache_feature(tmp_path, "a cache behind a password", PASSWORD_OPTIONS)
    rt = make_runtime('[default]\nremote_cache = true\nremote_cache_password = "S3CRETA"\n',
                      features_dir=fdir)
    answer = json.dumps(process_status(rt), default=str)
    assert "S3CRETA" not in answer and MASK in answer


@pytest.mark.parametrize("where", ["file", "env"])
def test_a_secret_option_never_travels_in_the_snapshot_and_the_child_reads_it_again(tmp_path, env, where):
    fdir = remote_cache_feature(tmp_path, "a cache behind a password", PASSWORD_OPTIONS)
    settings = tmp_path / "settings.toml"
    written = SECRETS["A"] if where == "file" else "not-the-one"
    settings.write_text(f'[default]\nremote_cache = true\nremote_cache_password = "{written}"\n')
    env = {**env, "DSV41_SETTINGS": str(settings), "DSV41_FEATURES_DIR": str(fdir)}
    if where == "env":
        env["DSV41_REMOTE_CACHE_PASSWORD"] = SECRETS["B"]
    expected = SECRETS["A"] if where == "file" else SECRETS["B"]
    digest = hashlib.sha256(expected.encode()).hexdigest()  # the probe's own text holds no secret
    probe = ("import hashlib, os, dsv41_flags\n"
             "raw = os.environ.get('DSV41_SNAPSHOT', '')\n"
             "if raw.startswith('file:'):\n"
             "    raw = open(raw[5:].split('#')[0]).read()\n"
             "rt = dsv41_flags.activate()\n"
             "value = rt.resolution.values['REMOTE_CACHE_PASSWORD'].value\n"
             f"same = hashlib.sha256(value.encode()).hexdigest() == {digest!r}\n"
             "print('SNAPSHOT', raw)\n"
             "print('FROM_SNAPSHOT', rt.from_snapshot, 'SAME', same)\n")
    r = subprocess.run([sys.executable, "-c", MAIN, "run", "--", sys.executable, "-c", probe],
                       env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    assert "FROM_SNAPSHOT True SAME True" in r.stdout, r.stdout + r.stderr
    snapshot = r.stdout.split("SNAPSHOT ", 1)[1].split("\nFROM_SNAPSHOT")[0]
    assert '"secret":true' in snapshot.replace(' ', '')
    for s in SECRETS.values():
        assert s not in snapshot, snapshot[max(0, snapshot.find(s) - 300):snapshot.find(s) + 50]
    assert_no_secret(r.stderr, "the events")


def test_a_bad_secret_option_value_is_named_never_shown(tmp_path, env):
    fdir = remote_cache_feature(tmp_path, "a cache behind a key", "Option('api_key_n', 'int', default=1),")
    settings = tmp_path / "settings.toml"
    settings.write_text(f'[default]\nremote_cache = true\nremote_cache_api_key_n = "{SECRETS["A"]}"\n')
    env = {**env, "DSV41_SETTINGS": str(settings), "DSV41_FEATURES_DIR": str(fdir),
           "DSV41_REMOTE_CACHE_API_KEY_N": SECRETS["B"]}
    for args in (["status"], ["status", "--json"], ["validate", "--json"]):
        r = cli(env, *args, cwd=tmp_path)
        assert r.returncode != 0 and "REMOTE_CACHE_API_KEY_N" in r.stdout + r.stderr, (args, r)
        assert "Traceback" not in r.stderr
        assert_no_secret(r.stdout + r.stderr, " ".join(args))


def test_the_setting_that_lists_secret_names_is_shown_as_set(tmp_path, env):
    (tmp_path / "settings.toml").write_text('[default]\nsecret_names = ["license-blob"]\n')
    env = {**env, "DSV41_SETTINGS": str(tmp_path / "settings.toml")}
    r = cli(env, "explain", "secret_names", cwd=tmp_path)
    assert r.returncode == 0 and "license-blob" in r.stdout, r.stdout + r.stderr
    assert not is_secret("SECRET_NAMES") and not is_secret("DSV41_SECRET_NAMES")
    assert is_secret("MY_SECRET_NAME") and is_secret("DB_SECRET")


# ------------------------------------------------- secrets inside values: URLs (credentials)
from hypothesis import given, settings as hsettings, strategies as st  # noqa: E402

from dsv41_flags.secrecy import masked_text, masked_url  # noqa: E402


@pytest.mark.parametrize("url,shown", [
    ("http://user:pw@127.0.0.1:1", f"http://{MASK}@127.0.0.1:1"),
    ("https://TOKEN@host/path?x=1", f"https://{MASK}@host/path?x=1"),
    ("http://a@b@host:1/", f"http://{MASK}@host:1/"),
    ("http://host:1/?api_key=S&tp=2", f"http://host:1/?api_key={MASK}&tp=2"),
    ("http://host/p?access_token=S;password=P#id_token=T",
     f"http://host/p?access_token={MASK};password={MASK}#id_token={MASK}"),
    ("http://host:abc@", f"http://{MASK}@"),                    # no valid URL: masked all the same
    ("http://host:1/?token=kv&max_total_tokens=4", "http://host:1/?token=***&max_total_tokens=4"),
    ("http://host/a@b", "http://host/a@b"),                     # an @ in the path is no userinfo
    ("host:1", "host:1"),
])
def test_a_urls_credentials_and_secret_parameters_are_masked(url, shown):
    assert masked_url(url, secret_names(facts=sglang_facts())) == shown


@hsettings(max_examples=60, deadline=None)
@given(user=st.text(st.characters(blacklist_characters="/?#@", blacklist_categories=("Cs",)),
                    max_size=12),
       password=st.text(st.characters(blacklist_characters="/?#@", blacklist_categories=("Cs",)),
                        min_size=6, max_size=20),
       value=st.text("abcdefXYZ0123456789-_.~%", min_size=6, max_size=20))
def test_no_credential_survives_masking_whatever_it_holds(user, password, value):
    url = f"http://{user}:{password}@h:1/p?password={value}"
    shown = masked_url(url)
    assert password not in shown.replace("h:1/p?password=", "") and value not in shown
    assert masked_text(f"cannot reach {url} now") == f"cannot reach {shown} now" or \
        any(c.isspace() for c in url)


@pytest.mark.parametrize("args", [
    ["set", "folded_fence=on", "--url", "http://user:S3CRET-PW@127.0.0.1:1"],
    ["set", "folded_fence=on", "--json", "--url", "http://user:S3CRET-PW@127.0.0.1:1"],
    ["status", "--url", "http://user:S3CRET-PW@127.0.0.1:1/"],
    ["status", "--url", "http://127.0.0.1:1/?api_key=S3CRET-PW"],
    ["status", "--json", "--url", "http://127.0.0.1:1/?x=1&password=S3CRET-PW"],
])
def test_credentials_in_url_are_never_printed_and_named_as_credentials(env, tmp_path, args):
    r = cli(env, *args, cwd=tmp_path)
    assert r.returncode == 2 and "S3CRET-PW" not in r.stdout + r.stderr, r.stdout + r.stderr
    said = json.loads(r.stdout)["error"] if "--json" in args else r.stderr
    assert MASK in said and "Traceback" not in r.stderr
    if "@" in args[-1]:
        assert "credentials" in said and "names no host" not in said


def test_the_http_client_never_names_a_urls_credentials():
    from dsv41_flags.engines.http_client import call_json
    from dsv41_flags.live import SwitchError

    with pytest.raises(SwitchError) as info:
        call_json("http://user:S3CRET-PW@127.0.0.1:1/dsv41_flags/status?api_key=S3CRET-Q",
                  api_key="S3CRET-K", timeout_s=5)
    message = str(info.value)
    assert "S3CRET" not in message and f"http://{MASK}@127.0.0.1:1/" in message, message


def test_a_url_with_credentials_in_a_settings_value_is_masked_in_every_output(tmp_path, env):
    """A value that is no secret by its name (an ordinary str option) holding a URL with
    credentials: ``status``, ``explain``, ``--json`` and ``fingerprint --explain`` show the URL
    with ``***`` for the credentials."""
    fdir = remote_cache_feature(tmp_path, "a cache at a URL", "Option('endpoint', 'str', default=''),")
    (tmp_path / "settings.toml").write_text(
        '[default]\nremote_cache = true\n'
        'remote_cache_endpoint = "https://cacheuser:S3CRET-PW@cache.internal:8443/?sig=1"\n')
    env = {**env, "DSV41_SETTINGS": str(tmp_path / "settings.toml"), "DSV41_FEATURES_DIR": str(fdir)}
    for args in (["status"], ["status", "--json"], ["explain", "remote_cache"],
                 ["explain", "remote_cache_endpoint", "--json"]):
        r = cli(env, *args, cwd=tmp_path)
        assert r.returncode == 0 and "Traceback" not in r.stderr, (args, r.stderr)
        assert "S3CRET-PW" not in r.stdout + r.stderr, args
        assert f"https://{MASK}@cache.internal:8443/?sig={MASK}" in r.stdout, (args, r.stdout)


@pytest.mark.parametrize("url,shown", [
    ("admin:S3CRET@127.0.0.1:42999", "***@127.0.0.1:42999"),            # no scheme
    ("http:/admin:S3CRET@127.0.0.1:42999", "http:/***@127.0.0.1:42999"),  # a malformed scheme
    ("http://127.0.0.1:42999/;api_key=S3CRET", "http://127.0.0.1:42999/;api_key=***"),  # path parameter
])
def test_credentials_are_masked_in_every_shape_of_url(url, shown):
    from dsv41_flags.secrecy import masked_url

    assert masked_url(url) == shown and "S3CRET" not in masked_url(url)
