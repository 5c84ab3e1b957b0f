"""PySpark source and sink for RocketMQ topics (``format("rocketmq")``), on Spark's Python Data Source API.

It speaks only the RocketMQ 4.x wire protocol (through ``tidemq.client``), so it reads from and writes to
``tidemq server`` and Apache RocketMQ brokers alike::

    from tidemq import spark as tidemq_spark
    tidemq_spark.register(spark)
    df = spark.read.format("rocketmq").option("namesrv", "127.0.0.1:9876").option("topic", "orders").load()

Owns the options, offsets and checkpoints of a Spark query, the record-to-Arrow conversion and the
writer. May import ``client``, ``remoting`` and the record layout; never ``broker``, ``store`` or
``namesrv``.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from tidemq.address import LOCALHOST
from tidemq.spark.arrow import SCHEMA, SCHEMA_DDL
from tidemq.spark.offsets import DataLossError
from tidemq.spark.options import OptionError
from tidemq.spark.source import RocketMQDataSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "SCHEMA",
    "SCHEMA_DDL",
    "DataLossError",
    "OptionError",
    "RocketMQDataSource",
    "local_session",
    "register",
]


def register(spark: SparkSession) -> None:
    """Make ``format("rocketmq")`` available in this session (reads, streams and writes)."""
    spark.dataSource.register(RocketMQDataSource)


def local_session(app_name: str = "tidemq", master: str = "local[2]", **conf: str) -> SparkSession:
    """A SparkSession with the source registered, whose Python workers run this interpreter.

    Spark starts its Python workers with ``$PYSPARK_PYTHON`` (``python3`` from PATH by default); pointing
    it at this interpreter means a virtualenv need not be activated for workers to import tidemq.
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", LOCALHOST)
    builder = SparkSession.builder.appName(app_name).master(master)
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.sql.session.timeZone": "UTC",
        **conf,
    }
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark
