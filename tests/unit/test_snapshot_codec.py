"""The snapshot codec, both directions in ``dsv41_flags.snapshot``: what ``encode`` writes,
``decode`` + ``materialize`` read back as the same launch."""
import json

import pytest

from dsv41_flags.snapshot import (Launch, decode, encode, fingerprint_from_dict, fingerprint_to_dict,
                                  materialize, resolution_to_dict)


@pytest.mark.parametrize("settings", [
    "[default]\n",
    "[default]\nfolded_fence = true\nautotune_keep = true\nautotune_keep_keep_old = 5\n",
    "[default]\nstrict = false\nlog_level = \"debug\"\n[default.fingerprint]\nvolatile = [\"SGLANG_X\"]\n",
])
def test_a_launch_read_back_is_the_launch_written(make_runtime, settings):
    rt = make_runtime(settings, argv=["python", "-m", "sglang.launch_server", "--tp", "2"])
    launch, features = materialize(decode(encode(rt.launch)))
    assert [f.name for f in features] == list(sorted(rt.features))
    assert resolution_to_dict(launch.resolution) == resolution_to_dict(rt.launch.resolution)
    assert launch.resolution.values == rt.launch.resolution.values
    assert fingerprint_to_dict(launch.fingerprint) == fingerprint_to_dict(rt.fingerprint)
    assert (launch.feature_files, launch.entry_points, launch.pid, dict(launch.env),
            launch.declarations) == (rt.launch.feature_files, rt.launch.entry_points,
                                     rt.launch.pid, dict(rt.launch.env), rt.launch.declarations)
    assert json.dumps(launch.to_dict(), sort_keys=True) == json.dumps(rt.launch.to_dict(), sort_keys=True)


def test_fingerprint_round_trip_keeps_digest_payload_and_exclusions(make_runtime):
    fp = make_runtime("[default]\n").fingerprint
    back = fingerprint_from_dict(json.loads(json.dumps(fingerprint_to_dict(fp))))
    assert (back.digest, dict(back.payload), dict(back.excluded)) == \
        (fp.digest, json.loads(json.dumps(dict(fp.payload))), dict(fp.excluded))
    assert Launch.from_dict.__qualname__ == "Launch.from_dict"
