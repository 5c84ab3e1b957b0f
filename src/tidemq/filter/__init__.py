"""Message filters a consumer subscribes with, shared by the broker (which evaluates them on the pull
path) and the clients (which check an expression before sending it)
(docs/protocols/rocketmq-consumption.md#sql92-filters).

Pure and sans-IO: it imports only the standard library, so both sides may use it.
"""

from tidemq.filter.sql92 import SqlExpression, SqlParseError, compile_sql

#: Java's ExpressionType names, as heartbeats' subscriptions and pulls' ``expressionType`` carry them.
TAG = "TAG"
SQL92 = "SQL92"

__all__ = ["SQL92", "TAG", "SqlExpression", "SqlParseError", "compile_sql"]
