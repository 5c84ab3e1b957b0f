"""``tidemq`` with the broker's slow-peer deadline set to ``argv[1]`` seconds: the deadline is a config field
(BrokerConfig.slow_peer_timeout_s), not a command-line option, so a test that needs it short runs the CLI
through this script (usage: ``python slow_peer_server.py SECONDS server --broker-port ...``)."""

from __future__ import annotations

import sys
from typing import Any

from tidemq.broker.config import BrokerConfig
from tidemq.cli import main, servers

SLOW_PEER_TIMEOUT_S = float(sys.argv.pop(1))
_broker_config = servers._broker_config


def _with_deadline(*args: Any) -> BrokerConfig:
    config = _broker_config(*args)
    config.slow_peer_timeout_s = SLOW_PEER_TIMEOUT_S
    return config


servers._broker_config = _with_deadline
main()
