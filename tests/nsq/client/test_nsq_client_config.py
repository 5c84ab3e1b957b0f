"""The NSQ client's Config: go-nsq's defaults, ranges and ``Set`` coercions; requeue and backoff math."""

from __future__ import annotations

import socket
import ssl
from datetime import timedelta

import pytest

from tidemq.nsq.client import Config, ConfigError, Consumer, Producer, parse_duration
from tidemq.nsq.client.config import backoff_duration, requeue_delay
from tidemq.nsq.client.lookup import build_lookup_url, producer_addresses

GO_NSQ_DEFAULTS = {
    "dial_timeout": 1.0,
    "read_timeout": 60.0,
    "write_timeout": 1.0,
    "local_addr": None,
    "lookupd_poll_interval": 60.0,
    "lookupd_poll_jitter": 0.3,
    "lookupd_poll_timeout": 60.0,
    "max_requeue_delay": 900.0,
    "default_requeue_delay": 90.0,
    "backoff_strategy": "exponential",
    "max_backoff_duration": 120.0,
    "backoff_multiplier": 1.0,
    "max_attempts": 5,
    "low_rdy_idle_timeout": 10.0,
    "low_rdy_timeout": 30.0,
    "rdy_redistribute_interval": 5.0,
    "topology_region": "",
    "topology_zone": "",
    "heartbeat_interval": 30.0,
    "sample_rate": 0,
    "tls_v1": False,
    "tls_config": None,
    "deflate": False,
    "deflate_level": 6,
    "snappy": False,
    "output_buffer_size": 16384,
    "output_buffer_timeout": 0.25,
    "max_in_flight": 1,
    "msg_timeout": 0.0,
    "max_msg_size": 0,
    "auth_secret": "",
    "lookupd_authorization": True,
}


def test_defaults_are_go_nsq_defaults() -> None:
    config = Config()
    for name, value in GO_NSQ_DEFAULTS.items():
        assert getattr(config, name) == value, name
    assert config.hostname == socket.gethostname()
    assert config.client_id == socket.gethostname().split(".")[0]
    assert config.user_agent.startswith("tidemq/")


@pytest.mark.parametrize(
    ("name", "low_bad", "low_ok", "high_ok", "high_bad"),
    [
        ("read_timeout", "99ms", "100ms", "5m", "5m1s"),
        ("write_timeout", "99ms", "100ms", "5m", "301s"),
        ("lookupd_poll_interval", "9ms", "10ms", "5m", "6m"),
        ("lookupd_poll_jitter", -0.1, 0, 1, 1.01),
        ("max_requeue_delay", "-1ms", 0, "60m", "61m"),
        ("default_requeue_delay", "-1ms", 0, "1h", "1h1s"),
        ("max_backoff_duration", "-1s", 0, "60m", "60m1ms"),
        ("backoff_multiplier", "-1s", 0, "60m", "2h"),
        ("max_attempts", -1, 0, 65535, 65536),
        ("low_rdy_idle_timeout", "999ms", "1s", "5m", "5m1s"),
        ("low_rdy_timeout", "999ms", "1s", "5m", "5m1s"),
        ("rdy_redistribute_interval", "0s", "1ms", "5s", "5001ms"),
        ("sample_rate", -1, 0, 99, 100),
        ("deflate_level", 0, 1, 9, 10),
    ],
)
def test_set_enforces_go_nsq_ranges(
    name: str, low_bad: object, low_ok: object, high_ok: object, high_bad: object
) -> None:
    config = Config(read_timeout=300.0)
    for bad in (low_bad, high_bad):
        with pytest.raises(ConfigError, match=name):
            config.set(name, bad)
    config.set(name, low_ok)
    config.set(name, high_ok)


def test_set_coerces_like_go_nsq() -> None:
    config = Config()
    config.set("read-timeout", "1m30s")
    assert config.read_timeout == 90.0
    config.set("output_buffer_timeout", 100)  # an int is milliseconds
    assert config.output_buffer_timeout == 0.1
    config.set("msg_timeout", timedelta(seconds=3))
    assert config.msg_timeout == 3.0
    config.set("max-in-flight", "32")
    assert config.max_in_flight == 32
    config.set("deflate", "true")
    config.set("tls_v1", 1)
    assert config.deflate is True and config.tls_v1 is True
    config.set("lookupd_poll_jitter", "0.5")
    assert config.lookupd_poll_jitter == 0.5
    config.set("backoff_strategy", "full_jitter")
    assert config.backoff_strategy == "full_jitter"
    config.set("skip_lookupd_authorization", False)  # go-nsq's option name for LookupdAuthorization
    assert config.lookupd_authorization is False
    with pytest.raises(ConfigError, match="invalid option"):
        config.set("no_such_option", 1)
    with pytest.raises(ConfigError, match="coerce"):
        config.set("read_timeout", "soon")
    with pytest.raises(ConfigError, match="coerce"):
        config.set("read_timeout", 1.5)  # ambiguous: seconds or milliseconds?
    with pytest.raises(ConfigError, match="coerce"):
        config.set("deflate", "maybe")
    with pytest.raises(ConfigError, match="backoff_strategy"):
        config.set("backoff_strategy", "linear")


def test_parse_duration_matches_go() -> None:
    assert parse_duration("250ms") == 0.25
    assert parse_duration("1h2m3s") == 3723.0
    assert parse_duration("1.5s") == 1.5
    assert parse_duration("-1.5h") == -5400.0
    assert parse_duration("0") == 0.0
    assert parse_duration("100us") == pytest.approx(0.0001)
    for bad in ("", "1", "s", "1x", "1s2", "--1s"):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_cross_field_validation() -> None:
    with pytest.raises(ConfigError, match="heartbeat_interval"):
        Config(heartbeat_interval=61.0)  # must not exceed read_timeout (60 s)
    with pytest.raises(ConfigError, match="both deflate and snappy"):
        Config(deflate=True, snappy=True)
    with pytest.raises(ConfigError, match="max_in_flight"):
        Config(max_in_flight=-1)
    config = Config()
    config.heartbeat_interval = 120.0
    with pytest.raises(ConfigError):
        config.validate()


def test_consumer_and_producer_validate_names_and_options() -> None:
    with pytest.raises(ValueError, match="topic"):
        Consumer("bad topic", "ch")
    with pytest.raises(ValueError, match="channel"):
        Consumer("t", "c" * 65)
    with pytest.raises(ConfigError, match="invalid option"):
        Consumer("t", "c", max_inflight=3)
    with pytest.raises(ConfigError, match="max_attempts"):
        Consumer("t", "c", max_attempts=70000)
    consumer = Consumer("t", "c#ephemeral", Config(max_in_flight=7), max_attempts=2)
    assert consumer.max_in_flight == 7 and consumer.config.max_attempts == 2
    with pytest.raises(ValueError, match="host:port"):
        Producer("localhost")
    shared = Config()
    producer = Producer("127.0.0.1:4150", shared, deflate=True)
    assert producer.config.deflate and not shared.deflate, "options apply to a copy"
    typed = Consumer("t", "c", read_timeout="1m", msg_timeout=timedelta(seconds=2), max_in_flight="9").config
    assert (typed.read_timeout, typed.msg_timeout, typed.max_in_flight) == (60.0, 2.0, 9)
    with pytest.raises(ConfigError, match="max_in_flight"):
        Config(max_in_flight="3")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="deflate"):
        Config(deflate=1)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="read_timeout"):
        Consumer("t", "c", read_timeout="later")


def test_requeue_delay_is_linear_and_capped() -> None:
    config = Config()
    assert [requeue_delay(config, n) for n in (1, 2, 9, 10, 11)] == [90, 180, 810, 900, 900]
    config = Config(default_requeue_delay=0.3, max_requeue_delay=0.5)
    assert requeue_delay(config, 1) == 0.3 and requeue_delay(config, 2) == 0.5


def test_backoff_strategies() -> None:
    config = Config()
    assert [backoff_duration(config, level, 0.5) for level in range(1, 8)] == [2, 4, 8, 16, 32, 64, 128]
    jitter = Config(backoff_strategy="full_jitter", backoff_multiplier=0.2)
    assert backoff_duration(jitter, 3, 0.0) == 0.0
    assert backoff_duration(jitter, 3, 0.5) == pytest.approx(0.8)
    assert backoff_duration(jitter, 3, 0.999) < 1.6


def test_ssl_context_from_helper_options() -> None:
    insecure = Config(tls_v1=True, tls_insecure_skip_verify=True, tls_min_version="tls1.2").ssl_context()
    assert insecure.verify_mode == ssl.CERT_NONE and not insecure.check_hostname
    assert insecure.minimum_version == ssl.TLSVersion.TLSv1_2
    given = ssl.create_default_context()
    assert Config(tls_config=given).ssl_context() is given
    with pytest.raises(ConfigError, match="tls_min_version"):
        Config(tls_min_version="ssl3.0")
    with pytest.raises(ConfigError, match="together"):
        Config(tls_cert="/some/cert.pem").ssl_context()


def test_lookup_url_and_response_forms() -> None:
    assert build_lookup_url("127.0.0.1:4161", "t") == "http://127.0.0.1:4161/lookup?topic=t"
    assert build_lookup_url("https://h:1/", "t") == "https://h:1/lookup?topic=t"
    assert build_lookup_url("http://h:1/x?a=1&topic=old", "t") == "http://h:1/x?a=1&topic=t"
    with pytest.raises(ValueError, match="port"):
        build_lookup_url("lookupd.example", "t")
    bare = b'{"channels":[],"producers":[{"broadcast_address":"10.0.0.1","tcp_port":4150}]}'
    wrapped = (
        b'{"status_code":200,"status_txt":"OK",'
        b'"data":{"producers":[{"broadcast_address":"::1","tcp_port":1}]}}'
    )
    assert producer_addresses(bare) == ["10.0.0.1:4150"]
    assert producer_addresses(wrapped) == ["[::1]:1"]
    assert producer_addresses(b'{"producers":[]}') == []
