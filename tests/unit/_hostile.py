"""Hostile inputs shared by test modules: sidecar contents of every wrong shape (valid JSON of the
wrong shape, nesting that exhausts the parser, bytes that are not UTF-8)."""

import json

HEX = "ab" * 32


HOSTILE_SIDECARS = {
    "argv_int": json.dumps({"fingerprint": "x" * 64, "payload": {"argv": 5}}),
    "argv_int_hex": json.dumps({"fingerprint": HEX, "payload": {"argv": 5, "env": {}, "settings": {}}}),
    "env_list": json.dumps({"fingerprint": HEX, "payload": {"env": [1]}}),
    "env_values": json.dumps({"fingerprint": HEX, "payload": {"argv": [], "env": {"A": 1}, "settings": {}}}),
    "settings_nested": json.dumps({"fingerprint": HEX, "payload": {"argv": [], "env": {},
                                                                    "settings": {"K": {"x": [1]}}}}),
    "deep": "[" * 100000,
    "deep_object": '{"fingerprint": ' + "[" * 100000,
    "not_utf8": b"\xff\xfe{}",
    "top_list": "[1, 2]",
}
