"""tidemq: a pure-Python message queue speaking RocketMQ 4.x remoting and NSQ."""

__version__ = "0.1.0"
