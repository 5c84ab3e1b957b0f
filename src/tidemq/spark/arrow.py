"""The source's schema (Spark's and Arrow's), and the sink's rows as messages.

Executors hand Spark whole Arrow record batches, column by column, rather than a Python tuple per row:
Spark then moves them to the JVM without converting each value on its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
from pyspark.sql.types import (
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from tidemq.client.message import Message

SCHEMA = StructType(
    [
        StructField("topic", StringType()),
        StructField("broker", StringType()),
        StructField("queue", IntegerType()),
        StructField("offset", LongType()),
        StructField("msg_id", StringType()),
        StructField("keys", StringType()),
        StructField("tags", StringType()),
        StructField("body", BinaryType()),
        StructField("properties", MapType(StringType(), StringType())),
        StructField("born_timestamp", TimestampType()),
        StructField("store_timestamp", TimestampType()),
        StructField("reconsume_times", IntegerType()),
    ]
)
SCHEMA_DDL = (
    "topic string, broker string, queue int, offset long, msg_id string, keys string, tags string, "
    "body binary, properties map<string,string>, born_timestamp timestamp, store_timestamp timestamp, "
    "reconsume_times int"
)

TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
PROPERTIES_TYPE = pa.map_(pa.string(), pa.string())
#: What Spark expects back for SCHEMA (Spark checks the batches it gets against exactly this).
ARROW_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("broker", pa.string()),
        ("queue", pa.int32()),
        ("offset", pa.int64()),
        ("msg_id", pa.string()),
        ("keys", pa.string()),
        ("tags", pa.string()),
        ("body", pa.binary()),
        ("properties", PROPERTIES_TYPE),
        ("born_timestamp", TIMESTAMP_TYPE),
        ("store_timestamp", TIMESTAMP_TYPE),
        ("reconsume_times", pa.int32()),
    ]
)


# --- writing ---------------------------------------------------------------------------------------------

WRITE_COLUMNS = ("topic", "body", "keys", "tags", "properties")


class SchemaError(ValueError):
    """The DataFrame handed to the sink cannot become messages; the message names the column."""


@dataclass(frozen=True, slots=True)
class WriteLayout:
    """Which sink columns the DataFrame has (others are ignored)."""

    body_is_text: bool
    has_topic: bool
    has_keys: bool
    has_tags: bool
    has_properties: bool


def write_layout(schema: StructType, topic_option: str | None) -> WriteLayout:
    """Check the DataFrame's columns on the driver, before any task runs."""
    fields: dict[str, DataType] = {f.name: f.dataType for f in schema.fields}
    body = fields.get("body")
    if body is None:
        raise SchemaError(
            f"body: the DataFrame has no 'body' column (binary or string); its columns: {', '.join(fields)}"
        )
    if not isinstance(body, BinaryType | StringType):
        raise SchemaError(f"body: column 'body' must be binary or string, not {body.simpleString()}")
    for name in ("topic", "keys", "tags"):
        dtype = fields.get(name)
        if dtype is not None and not isinstance(dtype, StringType):
            raise SchemaError(f"{name}: column '{name}' must be a string, not {dtype.simpleString()}")
    props = fields.get("properties")
    if props is not None and not (
        isinstance(props, MapType)
        and isinstance(props.keyType, StringType)
        and isinstance(props.valueType, StringType)
    ):
        raise SchemaError(
            f"properties: column 'properties' must be map<string,string>, not {props.simpleString()}"
        )
    if topic_option is None and "topic" not in fields:
        raise SchemaError("topic: give the 'topic' option or a 'topic' column")
    return WriteLayout(
        body_is_text=isinstance(body, StringType),
        has_topic="topic" in fields,
        has_keys="keys" in fields,
        has_tags="tags" in fields,
        has_properties=props is not None,
    )


def _first_null(column: pa.Array) -> int:
    return next(i for i, valid in enumerate(column.is_valid().to_pylist()) if not valid)


def batch_to_messages(batch: pa.RecordBatch, layout: WriteLayout, topic_option: str | None) -> list[Message]:
    """Rows of one Arrow batch as messages; a row that cannot be sent is a SchemaError naming it.

    Nulls are found per column by Arrow; rows with only a body and a topic (the common sink) skip the
    per-row handling of keys, tags and properties.
    """
    n = batch.num_rows
    names = batch.schema.names

    def column(name: str) -> list[Any]:
        return list(batch.column(names.index(name)).to_pylist()) if name in names else [None] * n

    body_column = batch.column(names.index("body"))
    if body_column.null_count:
        raise SchemaError(f"body: row {_first_null(body_column)} of a batch has a null body")
    bodies: list[Any] = body_column.to_pylist()
    if layout.body_is_text:
        bodies = [body.encode() for body in bodies]
    if topic_option is None:
        topic_column = batch.column(names.index("topic"))
        if topic_column.null_count:
            row = _first_null(topic_column)
            raise SchemaError(f"topic: row {row} of a batch has a null topic and no 'topic' option is set")
        topics: list[str] = topic_column.to_pylist()
    else:
        topics = [topic_option] * n
    extras = [
        name
        for name, present in (
            ("keys", layout.has_keys),
            ("tags", layout.has_tags),
            ("properties", layout.has_properties),
        )
        if present and batch.column(names.index(name)).null_count < n
    ]
    if not extras:
        return [Message(topic, body) for topic, body in zip(topics, bodies, strict=True)]
    keys = column("keys") if "keys" in extras else [None] * n
    tags = column("tags") if "tags" in extras else [None] * n
    props = column("properties") if "properties" in extras else [None] * n
    out = []
    for i in range(n):
        pairs = props[i]
        properties = {str(k): str(v) for k, v in pairs if v is not None} if isinstance(pairs, list) else {}
        out.append(
            Message(
                topics[i],
                bodies[i],
                tags=str(tags[i]) if tags[i] is not None else None,
                keys=str(keys[i]) if keys[i] is not None else None,
                properties=properties,
            )
        )
    return out


Ints = npt.NDArray[np.int64]


def spans(values: pa.Buffer, offsets: Ints, sizes: Ints, kind: pa.DataType) -> pa.Array:
    """One ``kind`` (binary or string) array of the spans (offset, size) of ``values``, spans in order and
    apart: the buffer is read as an array whose even elements are the spans (the odd ones are what lies
    between), and ``take`` copies the even ones out. A string span must cut UTF-8 only between
    characters (this does not check)."""
    n = len(sizes)
    if n and int(offsets[-1] + sizes[-1]) > np.iinfo(np.int32).max:
        raise OverflowError("spans past 2 GiB do not fit 32-bit Arrow offsets")
    bounds = np.empty(2 * n, np.int32)
    bounds[0::2] = offsets
    bounds[1::2] = offsets + sizes
    over_buffer = pa.Array.from_buffers(kind, 2 * n - 1, [None, pa.py_buffer(bounds), values])
    return over_buffer.take(pa.array(np.arange(0, 2 * n, 2, dtype=np.int32)))
