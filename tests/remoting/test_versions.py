"""Version codes to names, as Java's MQVersion.getVersionDesc maps them (the codes real clients send)."""

from __future__ import annotations

from tidemq.console.pages_groups import client_version
from tidemq.console.pages_overview import _version
from tidemq.remoting.versions import HIGHER_VERSION, NAMES, version_code, version_name


def test_codes_real_clients_and_brokers_send() -> None:
    assert version_name(0) == "V3_0_0_SNAPSHOT"
    assert version_name(15) == "V3_0_0_FINAL"
    assert version_name(407) == "V4_9_7"
    assert version_name(409) == "V4_9_8"
    assert version_name(479) == "V5_3_3"
    assert version_code("V5_3_3") == 479
    # Java's enum ends with 5.9.9 then HIGHER_VERSION; a code past it is the last name.
    assert NAMES[-2:] == ("V5_9_9", HIGHER_VERSION)
    assert len(NAMES) == 613
    assert version_name(10_000) == HIGHER_VERSION


def test_console_shows_names_not_codes() -> None:
    assert client_version(409) == "V4_9_8"
    assert client_version(None) == ""
    assert _version({"brokerVersionDesc": "V4_9_7", "brokerVersion": "407"}) == "V4_9_7"
    assert _version({"brokerVersionDesc": "479"}) == "V5_3_3"
    assert _version({"brokerVersion": "409"}) == "V4_9_8"
