"""NSQ: the TCP V2 protocol codec, an nsqd-compatible server on tidemq's store, and (later) clients."""
