"""IDENTIFY as the NSQ client sends it and nsqd's answers to IDENTIFY and AUTH as the client reads them."""

from __future__ import annotations

import orjson
import pytest

from tidemq.nsq.client.config import Config
from tidemq.nsq.client.errors import NSQClientError
from tidemq.nsq.client.negotiation import AuthResponse, IdentifyResponse, identify_body


def test_identify_sends_durations_in_milliseconds_and_minus_one_for_disabled() -> None:
    body = orjson.loads(
        identify_body(
            Config(
                client_id="short",
                hostname="long.example",
                heartbeat_interval=-1,
                output_buffer_timeout=0.25,
                msg_timeout=2.5,
                deflate=True,
                deflate_level=3,
            )
        )
    )
    assert body["heartbeat_interval"] == -1
    assert (body["output_buffer_timeout"], body["msg_timeout"]) == (250, 2500)
    assert (body["short_id"], body["long_id"]) == ("short", "long.example"), "go-nsq's deprecated pair"
    assert body["feature_negotiation"] is True
    assert (body["deflate"], body["deflate_level"], body["snappy"]) == (True, 3, False)


def test_identify_answer_fills_what_nsqd_leaves_out() -> None:
    resp = IdentifyResponse.parse(b'{"max_rdy_count": 100, "version": "1.3.0", "auth_required": true}')
    assert (resp.max_rdy_count, resp.version, resp.auth_required) == (100, "1.3.0", True)
    assert (resp.deflate, resp.snappy, resp.tls_v1) == (False, False, False)
    assert IdentifyResponse.parse(b"{}").max_rdy_count == 2500, "nsqd's default when it does not say"
    assert resp.raw["version"] == "1.3.0"


@pytest.mark.parametrize("data", [b"OK", b"[1, 2]", b'{"max_rdy_count": "many"}', b"\xff"])
def test_an_identify_answer_that_is_not_one_is_a_client_error(data: bytes) -> None:
    with pytest.raises(NSQClientError, match="invalid IDENTIFY response"):
        IdentifyResponse.parse(data)


def test_auth_answer() -> None:
    resp = AuthResponse.parse(b'{"identity": "me", "identity_url": "http://x", "permission_count": 2}')
    assert resp == AuthResponse("me", "http://x", 2)
    assert AuthResponse.parse(b"{}") == AuthResponse("", "", 0)
    for data in (b"[]", b"not json", b'{"permission_count": "all"}'):
        with pytest.raises(NSQClientError, match="invalid AUTH response"):
            AuthResponse.parse(data)
