"""protoc's Python output for the RocketMQ 5.x protocol (``make grpc-protos``); the ``.proto`` files beside
it are the source. Nothing here is edited by hand."""
