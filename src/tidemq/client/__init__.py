"""RocketMQ clients. They speak only the wire protocol, so they work against any 4.x broker."""
