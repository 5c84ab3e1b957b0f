"""The ``rocketmq`` data source: one class Spark instantiates for reads, streams and writes."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from tidemq.spark import cluster
from tidemq.spark.arrow import SCHEMA, write_layout
from tidemq.spark.options import OptionError, read_options, write_options
from tidemq.spark.reader import BatchReader, StreamReader
from tidemq.spark.writer import BatchWriter, StreamWriter


class RocketMQDataSource(DataSource):
    """``format("rocketmq")``: topics of any RocketMQ 4.x cluster (and ``tidemq server``) for Spark.

    Options are checked where Spark first hands them over, so a bad one fails the query on the driver
    with a message naming it, before any task is scheduled.
    """

    @classmethod
    def name(cls) -> str:
        return "rocketmq"

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(read_options(self.options, "batch"))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamReader(read_options(self.options, "stream"))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise OptionError("mode: 'overwrite' is not possible, a topic only grows; use mode('append')")
        opts = write_options(self.options)
        layout = write_layout(schema, opts.topic)
        cluster.check_namesrv(opts.namesrv, opts.credentials)
        return BatchWriter(opts, layout)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        opts = write_options(self.options)
        layout = write_layout(schema, opts.topic)
        cluster.check_namesrv(opts.namesrv, opts.credentials)
        return StreamWriter(opts, layout)
