"""The stored message record: the one layout every front-end and the store share
(docs/protocols/rocketmq-messages.md).

A RocketMQ broker keeps messages in exactly this layout, so a pull answer is a slice of the commit log;
nsqd stores its messages the same way, and the Spark source reads it into columns. So the layout is not
the RocketMQ wire's: it sits at the bottom, and ``remoting``, ``store``, ``broker``, ``nsq``, ``client``
and ``spark`` all read and write records through this package.

It owns:

- ``layout``: where each field sits (named offsets and sizes, struct formats), sys flags, magic codes;
- ``properties``: the property keys, the properties codec, the tags hash;
- ``ids``: host fields, offset message ids, unique ids (UNIQ_KEY);
- ``message``: ``MessageExt``, a decoded record;
- ``codec``: the reference codec (encode and decode one record, iterate records);
- ``batch``: a producer's batch body and ``StoredBatch``, the store's input;
- ``_fast``: the hand-optimised twins of the reference codec, each pinned to its twin by a property
  test in tests/record/.

What stays in ``remoting``: the envelope a record travels in (frames, request and response headers,
codes, commands, JSON bodies, the transport); it carries records and batch bodies as opaque bytes.

It imports only the standard library: no I/O, and nothing from the packages that use it. Import its
names from here (``from tidemq.record import MessageExt``); code that reads a record field by field (the
commit log's recovery, the Spark source) takes the field names from ``tidemq.record.layout``.
"""

from tidemq.record._fast import (
    build_stored_batch,
    build_uniform_batch,
    decode_records,
    property_value,
    record_bodies,
    record_properties,
)
from tidemq.record.batch import BatchItem, StoredBatch, add_item, decode_batch, encode_batch
from tidemq.record.codec import compress_body, decode_record, decompress_body, encode_record, iter_records
from tidemq.record.ids import (
    UniqueIdGenerator,
    decode_offset_msg_id,
    offset_msg_id,
    offset_msg_ids,
    pack_host,
    unpack_host,
)
from tidemq.record.layout import (
    LOOPBACK_HOST,
    MAGIC_BLANK,
    MAGIC_MESSAGE,
    MAX_PROPERTIES,
    MessageDecodeError,
    SysFlag,
    store_timestamp_pos,
)
from tidemq.record.message import MessageExt
from tidemq.record.properties import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    Prop,
    decode_properties,
    encode_properties,
    key_prefix,
    tag_hash,
)

__all__ = [
    "LOOPBACK_HOST",
    "MAGIC_BLANK",
    "MAGIC_MESSAGE",
    "MAX_PROPERTIES",
    "NAME_VALUE_SEPARATOR",
    "PROPERTY_SEPARATOR",
    "BatchItem",
    "MessageDecodeError",
    "MessageExt",
    "Prop",
    "StoredBatch",
    "SysFlag",
    "UniqueIdGenerator",
    "add_item",
    "build_stored_batch",
    "build_uniform_batch",
    "compress_body",
    "decode_batch",
    "decode_offset_msg_id",
    "decode_properties",
    "decode_record",
    "decode_records",
    "decompress_body",
    "encode_batch",
    "encode_properties",
    "encode_record",
    "iter_records",
    "key_prefix",
    "offset_msg_id",
    "offset_msg_ids",
    "pack_host",
    "property_value",
    "record_bodies",
    "record_properties",
    "store_timestamp_pos",
    "tag_hash",
    "unpack_host",
]
