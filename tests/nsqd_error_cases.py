"""The table for ``tests/nsq/nsqd/test_nsqd_errors.py``: invalid input to nsqd's TCP V2 and the exact answer.

Each :class:`Case` names the connection state to start from, the raw bytes to send from there, and what
nsqd v1.3.0 answers: the error code, the exact description (``nsqd/protocol_v2.go``,
``nsqd/client_v2.go``, ``nsqd/channel.go``, ``nsqd/tcp.go``; ``None`` where nsqd's text is not pinned
down) and whether the error is fatal (nsqd closes the connection after the frame).


The server these cases run against is started with ``LIMITS_ARGS`` (small, easy-to-cross limits).
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

import orjson

MAX_RDY = 10
MAX_MSG = 1024
MAX_BODY = 4096
MEM_QUEUE = 5
MAX_REQ_MS = 3_600_000  # nsqd's --max-req-timeout default (tidemq has no flag for it)
LIMITS_ARGS = (
    "--max-rdy-count",
    str(MAX_RDY),
    "--max-msg-size",
    str(MAX_MSG),
    "--max-body-size",
    str(MAX_BODY),
    "--mem-queue-size",
    str(MEM_QUEUE),
)
ID = b"0123456789abcdef"  # a well-formed (16 byte) message id that is never in flight
NOT_IN_FLIGHT = b"0000000000000000"


class Setup(enum.Enum):
    RAW = "raw"  # TCP connected, magic not sent
    INIT = "init"  # magic sent
    HB_OFF = "hb_off"  # IDENTIFY heartbeat_interval -1 answered OK
    SUBSCRIBED = "subscribed"  # SUB answered OK, RDY 0
    CLOSING = "closing"  # SUB, then CLS answered CLOSE_WAIT


@dataclass(frozen=True)
class Case:
    id: str
    setup: Setup
    send: bytes
    code: str
    #: nsqd's exact text after the code; "" = the frame is the bare code; None = not pinned down.
    desc: str | None
    fatal: bool = True

    @property
    def payload(self) -> bytes | None:
        if self.desc is None:
            return None
        return self.code.encode() if self.desc == "" else f"{self.code} {self.desc}".encode()


def size(n: int) -> bytes:
    return struct.pack(">i", n)


def body(data: bytes) -> bytes:
    return size(len(data)) + data


def identify(fields: object) -> bytes:
    return b"IDENTIFY\n" + body(orjson.dumps(fields))


def mpub(topic: bytes, *elements: bytes, count: int | None = None) -> bytes:
    """An MPUB command; ``elements`` are raw bytes (size prefixes included) so they can lie."""
    inner = size(len(elements) if count is None else count) + b"".join(elements)
    return b"MPUB " + topic + b"\n" + body(inner)


def element(data: bytes) -> bytes:
    return size(len(data)) + data


def go_quote(name: str) -> str:
    """Go's %q of a printable name (what nsqd puts around topic/channel names)."""
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


T65 = "t" * 65
C65 = "c" * 65
EPH65 = "e" * 55 + "#ephemeral"


def _bad_name_cases() -> list[Case]:
    """Invalid topic and channel names through every command that takes one."""
    cases: list[Case] = []
    bad_topics = {
        "slash": "a/b",
        "colon": "a:b",
        "bang": "bad!",
        "len65": T65,
        "unicode": "tópico",
        "eph_only": "#ephemeral",
        "eph_twice": "t#ephemeral#ephemeral",
        "eph_partial": "t#eph",
        "eph_len65": EPH65,
    }
    for key, name in bad_topics.items():
        raw = name.encode()
        cases.append(
            Case(
                f"sub_topic_{key}",
                Setup.INIT,
                b"SUB " + raw + b" c\n",
                "E_BAD_TOPIC",
                f"SUB topic name {go_quote(name)} is not valid",
            )
        )
        cases.append(
            Case(
                f"sub_channel_{key}",
                Setup.INIT,
                b"SUB names " + raw + b"\n",
                "E_BAD_CHANNEL",
                f"SUB channel name {go_quote(name)} is not valid",
            )
        )
    for key, name in (("bang", "bad!"), ("len65", T65), ("unicode", "tópico"), ("eph_len65", EPH65)):
        raw = name.encode()
        quoted = go_quote(name)
        cases += [
            Case(
                f"pub_topic_{key}",
                Setup.INIT,
                b"PUB " + raw + b"\n" + body(b"m"),
                "E_BAD_TOPIC",
                f"PUB topic name {quoted} is not valid",
            ),
            Case(
                f"mpub_topic_{key}",
                Setup.INIT,
                mpub(raw, element(b"m")),
                "E_BAD_TOPIC",
                f"E_BAD_TOPIC MPUB topic name {quoted} is not valid",
            ),
            Case(
                f"dpub_topic_{key}",
                Setup.INIT,
                b"DPUB " + raw + b" 10\n" + body(b"m"),
                "E_BAD_TOPIC",
                f"DPUB topic name {quoted} is not valid",
            ),
        ]
    cases += [
        Case(
            "sub_topic_empty",
            Setup.INIT,
            b"SUB  c\n",
            "E_BAD_TOPIC",
            'SUB topic name "" is not valid',
        ),
        Case(
            "sub_channel_empty",
            Setup.INIT,
            b"SUB names \n",
            "E_BAD_CHANNEL",
            'SUB channel name "" is not valid',
        ),
        Case("sub_topic_not_utf8", Setup.INIT, b"SUB t\xff c\n", "E_BAD_TOPIC", None),
        Case(
            "pub_topic_empty",
            Setup.INIT,
            b"PUB \n" + body(b"m"),
            "E_BAD_TOPIC",
            'PUB topic name "" is not valid',
        ),
    ]
    return cases


def _identify_cases() -> list[Case]:
    cases = [
        Case(
            "identify_size_zero",
            Setup.INIT,
            b"IDENTIFY\n" + size(0),
            "E_BAD_BODY",
            "IDENTIFY invalid body size 0",
        ),
        Case(
            "identify_size_negative",
            Setup.INIT,
            b"IDENTIFY\n" + size(-1),
            "E_BAD_BODY",
            "IDENTIFY invalid body size -1",
        ),
        Case(  # only the size header: refused before a body is read
            "identify_too_big_header_only",
            Setup.INIT,
            b"IDENTIFY\n" + size(MAX_BODY + 1),
            "E_BAD_BODY",
            f"IDENTIFY body too big {MAX_BODY + 1} > {MAX_BODY}",
        ),
        Case(
            "identify_not_json",
            Setup.INIT,
            b"IDENTIFY\n" + body(b"notjson"),
            "E_BAD_BODY",
            "IDENTIFY failed to decode JSON body",
        ),
        Case(
            "identify_trailing_garbage",
            Setup.INIT,
            b"IDENTIFY\n" + body(b"{}x"),
            "E_BAD_BODY",
            "IDENTIFY failed to decode JSON body",
        ),
        Case(
            "identify_json_array",
            Setup.INIT,
            b"IDENTIFY\n" + body(b"[]"),
            "E_BAD_BODY",
            "IDENTIFY failed to decode JSON body",
        ),
        Case(
            "identify_json_string",
            Setup.INIT,
            b"IDENTIFY\n" + body(b'"hello"'),
            "E_BAD_BODY",
            "IDENTIFY failed to decode JSON body",
        ),
        Case(
            "identify_snappy_and_deflate",
            Setup.INIT,
            identify({"feature_negotiation": True, "snappy": True, "deflate": True}),
            "E_IDENTIFY_FAILED",
            "cannot enable both deflate and snappy compression",
        ),
        Case(
            "identify_bad_obuf_size_and_timeout",
            Setup.INIT,
            identify({"output_buffer_size": 1, "output_buffer_timeout": 1}),
            "E_BAD_BODY",
            "IDENTIFY output buffer timeout (1) is invalid",
        ),
    ]
    wrong_types = {
        "heartbeat_string": {"heartbeat_interval": "30000"},
        "heartbeat_bool": {"heartbeat_interval": True},
        "heartbeat_float": {"heartbeat_interval": 1000.5},
        "obuf_size_string": {"output_buffer_size": "16384"},
        "obuf_timeout_list": {"output_buffer_timeout": [250]},
        "sample_rate_string": {"sample_rate": "50"},
        "msg_timeout_object": {"msg_timeout": {"ms": 1000}},
        "deflate_level_string": {"deflate_level": "6"},
        "client_id_int": {"client_id": 5},
        "hostname_list": {"hostname": ["h"]},
        "user_agent_bool": {"user_agent": False},
        "feature_negotiation_string": {"feature_negotiation": "yes"},
        "tls_v1_int": {"tls_v1": 1},
        "snappy_string": {"snappy": "true"},
    }
    for key, fields in wrong_types.items():
        cases.append(
            Case(
                f"identify_type_{key}",
                Setup.INIT,
                identify(fields),
                "E_BAD_BODY",
                "IDENTIFY failed to decode JSON body",
            )
        )
    out_of_range = [
        ("heartbeat_interval", "heartbeat interval", (999, 60_001, -2, 1)),
        ("output_buffer_size", "output buffer size", (63, 65_537, -2, 1)),
        ("output_buffer_timeout", "output buffer timeout", (24, 30_001, -2, 1)),
        ("sample_rate", "sample rate", (-1, 100)),
        ("msg_timeout", "msg timeout", (999, 900_001, -1)),
    ]
    for key, words, values in out_of_range:
        for value in values:
            cases.append(
                Case(
                    f"identify_{key}_{value}".replace("-", "minus"),
                    Setup.INIT,
                    identify({key: value}),
                    "E_BAD_BODY",
                    f"IDENTIFY {words} ({value}) is invalid",
                )
            )
    return cases


def _mpub_cases() -> list[Case]:
    return [
        Case("mpub_size_zero", Setup.INIT, b"MPUB t\n" + size(0), "E_BAD_BODY", "MPUB invalid body size 0"),
        Case(
            "mpub_size_negative",
            Setup.INIT,
            b"MPUB t\n" + size(-1),
            "E_BAD_BODY",
            "MPUB invalid body size -1",
        ),
        Case(  # only the size header
            "mpub_too_big_header_only",
            Setup.INIT,
            b"MPUB t\n" + size(MAX_BODY + 1),
            "E_BAD_BODY",
            f"MPUB body too big {MAX_BODY + 1} > {MAX_BODY}",
        ),
        Case(
            "mpub_count_zero", Setup.INIT, mpub(b"t", count=0), "E_BAD_BODY", "MPUB invalid message count 0"
        ),
        Case(
            "mpub_count_negative",
            Setup.INIT,
            mpub(b"t", element(b"m"), count=-1),
            "E_BAD_BODY",
            "MPUB invalid message count -1",
        ),
        Case(  # (max-body-size - 4) / 5 = 818 is the most a body can hold
            "mpub_count_too_large",
            Setup.INIT,
            mpub(b"t", element(b"m"), count=(MAX_BODY - 4) // 5 + 1),
            "E_BAD_BODY",
            f"MPUB invalid message count {(MAX_BODY - 4) // 5 + 1}",
        ),
        Case(
            "mpub_count_huge",
            Setup.INIT,
            mpub(b"t", element(b"m"), count=2**31 - 1),
            "E_BAD_BODY",
            f"MPUB invalid message count {2**31 - 1}",
        ),
        Case(
            "mpub_element_size_zero",
            Setup.INIT,
            mpub(b"t", size(0)),
            "E_BAD_MESSAGE",
            "MPUB invalid message(0) body size 0",
        ),
        Case(
            "mpub_second_element_negative",
            Setup.INIT,
            mpub(b"t", element(b"a"), size(-1)),
            "E_BAD_MESSAGE",
            "MPUB invalid message(1) body size -1",
        ),
        Case(
            "mpub_element_too_big",
            Setup.INIT,
            mpub(b"t", element(b"x" * (MAX_MSG + 1))),
            "E_BAD_MESSAGE",
            f"MPUB message too big {MAX_MSG + 1} > {MAX_MSG}",
        ),
        # nsqd reads MPUB elements straight off the socket, past the outer size; spec 1.5 has a Python
        # server read exactly the outer size and refuse an inconsistent body with fatal E_BAD_BODY.
        Case("mpub_element_truncated", Setup.INIT, mpub(b"t", size(10) + b"abc"), "E_BAD_BODY", None),
        Case(
            "mpub_count_exceeds_elements", Setup.INIT, mpub(b"t", element(b"a"), count=3), "E_BAD_BODY", None
        ),
        Case("mpub_trailing_bytes", Setup.INIT, mpub(b"t", element(b"a"), b"zz"), "E_BAD_BODY", None),
    ]


CASES: list[Case] = [
    # --- connection start and command names
    Case("bad_magic_v1", Setup.RAW, b"  V1", "E_BAD_PROTOCOL", ""),
    Case(
        "bad_magic_http",
        Setup.RAW,
        b"GET / HTTP/1.1\r\n\r\n",
        "E_BAD_PROTOCOL",
        "",
    ),
    Case("unknown_command", Setup.INIT, b"BOGUS\n", "E_INVALID", "invalid command BOGUS"),
    Case("unknown_command_crlf", Setup.INIT, b"BOGUS x\r\n", "E_INVALID", "invalid command BOGUS"),
    Case("lowercase_command", Setup.INIT, b"pub t\n", "E_INVALID", "invalid command pub"),
    Case("empty_line", Setup.INIT, b"\n", "E_INVALID", "invalid command "),
    Case("unknown_command_subscribed", Setup.SUBSCRIBED, b"WAT\n", "E_INVALID", "invalid command WAT"),
    # --- commands in the wrong state
    Case("rdy_before_sub", Setup.INIT, b"RDY 1\n", "E_INVALID", "cannot RDY in current state"),
    Case("fin_before_sub", Setup.INIT, b"FIN " + ID + b"\n", "E_INVALID", "cannot FIN in current state"),
    Case("req_before_sub", Setup.INIT, b"REQ " + ID + b" 0\n", "E_INVALID", "cannot REQ in current state"),
    Case(
        "touch_before_sub", Setup.INIT, b"TOUCH " + ID + b"\n", "E_INVALID", "cannot TOUCH in current state"
    ),
    Case("cls_before_sub", Setup.INIT, b"CLS\n", "E_INVALID", "cannot CLS in current state"),
    Case("sub_twice", Setup.SUBSCRIBED, b"SUB errs other\n", "E_INVALID", "cannot SUB in current state"),
    Case(
        "identify_after_sub",
        Setup.SUBSCRIBED,
        identify({"client_id": "late"}),
        "E_INVALID",
        "cannot IDENTIFY in current state",
    ),
    Case(
        "auth_after_sub",
        Setup.SUBSCRIBED,
        b"AUTH\n" + body(b"secret"),
        "E_INVALID",
        "cannot AUTH in current state",
    ),
    Case("cls_twice", Setup.CLOSING, b"CLS\n", "E_INVALID", "cannot CLS in current state"),
    Case("sub_after_cls", Setup.CLOSING, b"SUB errs other\n", "E_INVALID", "cannot SUB in current state"),
    Case("identify_after_cls", Setup.CLOSING, identify({}), "E_INVALID", "cannot IDENTIFY in current state"),
    Case(
        "sub_heartbeats_disabled",
        Setup.HB_OFF,
        b"SUB errs c\n",
        "E_INVALID",
        "cannot SUB with heartbeats disabled",
    ),
    # --- AUTH on a server without auth
    Case("auth_disabled", Setup.INIT, b"AUTH\n" + body(b"secret"), "E_AUTH_DISABLED", "AUTH disabled"),
    Case(
        "auth_with_param",
        Setup.INIT,
        b"AUTH x\n" + body(b"secret"),
        "E_INVALID",
        "AUTH invalid number of parameters",
    ),
    Case("auth_size_zero", Setup.INIT, b"AUTH\n" + size(0), "E_BAD_BODY", "AUTH invalid body size 0"),
    Case(
        "auth_too_big_header_only",
        Setup.INIT,
        b"AUTH\n" + size(MAX_BODY + 1),
        "E_BAD_BODY",
        f"AUTH body too big {MAX_BODY + 1} > {MAX_BODY}",
    ),
    # --- missing parameters
    Case("sub_no_params", Setup.INIT, b"SUB\n", "E_INVALID", "SUB insufficient number of parameters"),
    Case("sub_one_param", Setup.INIT, b"SUB errs\n", "E_INVALID", "SUB insufficient number of parameters"),
    Case("fin_no_id", Setup.SUBSCRIBED, b"FIN\n", "E_INVALID", "FIN insufficient number of params"),
    Case("req_no_params", Setup.SUBSCRIBED, b"REQ\n", "E_INVALID", "REQ insufficient number of params"),
    Case(
        "req_no_timeout",
        Setup.SUBSCRIBED,
        b"REQ " + ID + b"\n",
        "E_INVALID",
        "REQ insufficient number of params",
    ),
    Case(
        "req_bad_id_no_timeout",
        Setup.SUBSCRIBED,
        b"REQ abc\n",
        "E_INVALID",
        "REQ insufficient number of params",
    ),
    Case("touch_no_id", Setup.SUBSCRIBED, b"TOUCH\n", "E_INVALID", "TOUCH insufficient number of params"),
    Case(
        "pub_no_topic",
        Setup.INIT,
        b"PUB\n" + body(b"m"),
        "E_INVALID",
        "PUB insufficient number of parameters",
    ),
    Case(
        "mpub_no_topic",
        Setup.INIT,
        b"MPUB\n" + body(size(1) + element(b"m")),
        "E_INVALID",
        "MPUB insufficient number of parameters",
    ),
    Case(
        "dpub_no_params",
        Setup.INIT,
        b"DPUB\n" + body(b"m"),
        "E_INVALID",
        "DPUB insufficient number of parameters",
    ),
    Case(
        "dpub_no_timeout",
        Setup.INIT,
        b"DPUB t\n" + body(b"m"),
        "E_INVALID",
        "DPUB insufficient number of parameters",
    ),
    Case(
        "dpub_bad_topic_no_timeout",
        Setup.INIT,
        b"DPUB bad!\n" + body(b"m"),
        "E_INVALID",
        "DPUB insufficient number of parameters",
    ),
    # --- message IDs of the wrong length
    Case(
        "fin_short_id",
        Setup.SUBSCRIBED,
        b"FIN abc\n",
        "E_INVALID",
        "invalid message ID",
    ),
    Case(
        "fin_long_id",
        Setup.SUBSCRIBED,
        b"FIN " + ID + b"0\n",
        "E_INVALID",
        "invalid message ID",
    ),
    Case("fin_empty_id", Setup.SUBSCRIBED, b"FIN \n", "E_INVALID", "invalid message ID"),
    Case(
        "req_short_id",
        Setup.SUBSCRIBED,
        b"REQ abc 0\n",
        "E_INVALID",
        "invalid message ID",
    ),
    Case(
        "touch_short_id",
        Setup.SUBSCRIBED,
        b"TOUCH abc\n",
        "E_INVALID",
        "invalid message ID",
    ),
    Case(
        "fin_short_id_closing",
        Setup.CLOSING,
        b"FIN abc\n",
        "E_INVALID",
        "invalid message ID",
    ),
    # --- integers nsqd cannot parse (digits only: no sign) and RDY out of range
    Case(
        "rdy_abc",
        Setup.SUBSCRIBED,
        b"RDY abc\n",
        "E_INVALID",
        "RDY could not parse count abc",
    ),
    Case(
        "rdy_negative",
        Setup.SUBSCRIBED,
        b"RDY -1\n",
        "E_INVALID",
        "RDY could not parse count -1",
    ),
    Case(
        "rdy_plus",
        Setup.SUBSCRIBED,
        b"RDY +5\n",
        "E_INVALID",
        "RDY could not parse count +5",
    ),
    Case(
        "rdy_above_max",
        Setup.SUBSCRIBED,
        f"RDY {MAX_RDY + 1}\n".encode(),
        "E_INVALID",
        f"RDY count {MAX_RDY + 1} out of range 0-{MAX_RDY}",
    ),
    Case(
        "req_negative",
        Setup.SUBSCRIBED,
        b"REQ " + ID + b" -1\n",
        "E_INVALID",
        "REQ could not parse timeout -1",
    ),
    Case(
        "req_abc",
        Setup.SUBSCRIBED,
        b"REQ " + ID + b" abc\n",
        "E_INVALID",
        "REQ could not parse timeout abc",
    ),
    Case(
        "dpub_x",
        Setup.INIT,
        b"DPUB t x\n" + body(b"m"),
        "E_INVALID",
        "DPUB could not parse timeout x",
    ),
    Case(
        "dpub_negative",
        Setup.INIT,
        b"DPUB t -1\n" + body(b"m"),
        "E_INVALID",
        "DPUB could not parse timeout -1",
    ),
    Case(
        "dpub_above_max",
        Setup.INIT,
        f"DPUB t {MAX_REQ_MS + 1}\n".encode() + body(b"m"),
        "E_INVALID",
        f"DPUB timeout {MAX_REQ_MS + 1} out of range 0-{MAX_REQ_MS}",
    ),
    # --- PUB / DPUB body sizes (the too-big ones send only the size header)
    Case(
        "pub_size_zero", Setup.INIT, b"PUB t\n" + size(0), "E_BAD_MESSAGE", "PUB invalid message body size 0"
    ),
    Case(
        "pub_size_negative",
        Setup.INIT,
        b"PUB t\n" + size(-1),
        "E_BAD_MESSAGE",
        "PUB invalid message body size -1",
    ),
    Case(
        "pub_too_big_header_only",
        Setup.INIT,
        b"PUB t\n" + size(MAX_MSG + 1),
        "E_BAD_MESSAGE",
        f"PUB message too big {MAX_MSG + 1} > {MAX_MSG}",
    ),
    Case(
        "pub_huge_header_only",
        Setup.INIT,
        b"PUB t\n" + size(2**31 - 1),
        "E_BAD_MESSAGE",
        f"PUB message too big {2**31 - 1} > {MAX_MSG}",
    ),
    Case(
        "dpub_size_zero",
        Setup.INIT,
        b"DPUB t 10\n" + size(0),
        "E_BAD_MESSAGE",
        "DPUB invalid message body size 0",
    ),
    Case(
        "dpub_size_negative",
        Setup.INIT,
        b"DPUB t 10\n" + size(-5),
        "E_BAD_MESSAGE",
        "DPUB invalid message body size -5",
    ),
    Case(
        "dpub_too_big_header_only",
        Setup.INIT,
        b"DPUB t 10\n" + size(MAX_MSG + 1),
        "E_BAD_MESSAGE",
        f"DPUB message too big {MAX_MSG + 1} > {MAX_MSG}",
    ),
    Case(
        "pub_subscribed_too_big",
        Setup.SUBSCRIBED,
        b"PUB t\n" + size(MAX_MSG + 1),
        "E_BAD_MESSAGE",
        f"PUB message too big {MAX_MSG + 1} > {MAX_MSG}",
    ),
    # the command line is judged before the size: a bad topic/timeout wins over a bad size
    Case(
        "pub_bad_topic_and_size",
        Setup.INIT,
        b"PUB bad!\n" + size(0),
        "E_BAD_TOPIC",
        'PUB topic name "bad!" is not valid',
    ),
    Case(
        "pub_no_topic_and_bad_size",
        Setup.INIT,
        b"PUB\n" + size(MAX_MSG + 1),
        "E_INVALID",
        "PUB insufficient number of parameters",
    ),
    Case(
        "dpub_bad_timeout_and_size",
        Setup.INIT,
        b"DPUB t x\n" + size(MAX_MSG + 1),
        "E_INVALID",
        "DPUB could not parse timeout x",
    ),
    *_mpub_cases(),
    *_identify_cases(),
    *_bad_name_cases(),
    # --- non-fatal: FIN/REQ/TOUCH of an id that is not in flight
    Case(
        "fin_not_in_flight",
        Setup.SUBSCRIBED,
        b"FIN " + NOT_IN_FLIGHT + b"\n",
        "E_FIN_FAILED",
        f"FIN {NOT_IN_FLIGHT.decode()} failed ID not in flight",
        fatal=False,
    ),
    Case(
        "fin_not_in_flight_extra_param",
        Setup.SUBSCRIBED,
        b"FIN " + NOT_IN_FLIGHT + b" extra\n",
        "E_FIN_FAILED",
        f"FIN {NOT_IN_FLIGHT.decode()} failed ID not in flight",
        fatal=False,
    ),
    Case(
        "req_not_in_flight",
        Setup.SUBSCRIBED,
        b"REQ " + NOT_IN_FLIGHT + b" 0\n",
        "E_REQ_FAILED",
        f"REQ {NOT_IN_FLIGHT.decode()} failed ID not in flight",
        fatal=False,
    ),
    Case(  # empty timeout parses as 0
        "req_not_in_flight_empty_timeout",
        Setup.SUBSCRIBED,
        b"REQ " + NOT_IN_FLIGHT + b" \n",
        "E_REQ_FAILED",
        f"REQ {NOT_IN_FLIGHT.decode()} failed ID not in flight",
        fatal=False,
    ),
    Case(  # a timeout above max-req-timeout is clamped (nsq #868), not fatal
        "req_not_in_flight_timeout_above_max",
        Setup.SUBSCRIBED,
        b"REQ " + NOT_IN_FLIGHT + b" 99999999999\n",
        "E_REQ_FAILED",
        f"REQ {NOT_IN_FLIGHT.decode()} failed ID not in flight",
        fatal=False,
    ),
    Case(
        "touch_not_in_flight",
        Setup.SUBSCRIBED,
        b"TOUCH " + NOT_IN_FLIGHT + b"\n",
        "E_TOUCH_FAILED",
        f"TOUCH {NOT_IN_FLIGHT.decode()} failed ID not in flight",
        fatal=False,
    ),
    Case(
        "fin_not_in_flight_closing",
        Setup.CLOSING,
        b"FIN " + NOT_IN_FLIGHT + b"\n",
        "E_FIN_FAILED",
        f"FIN {NOT_IN_FLIGHT.decode()} failed ID not in flight",
        fatal=False,
    ),
    Case(
        "req_not_in_flight_closing",
        Setup.CLOSING,
        b"REQ " + NOT_IN_FLIGHT + b" 10\n",
        "E_REQ_FAILED",
        f"REQ {NOT_IN_FLIGHT.decode()} failed ID not in flight",
        fatal=False,
    ),
    Case(
        "touch_not_in_flight_closing",
        Setup.CLOSING,
        b"TOUCH " + NOT_IN_FLIGHT + b"\n",
        "E_TOUCH_FAILED",
        f"TOUCH {NOT_IN_FLIGHT.decode()} failed ID not in flight",
        fatal=False,
    ),
]


@dataclass(frozen=True)
class Accepted:
    """Input nsqd accepts: the responses it sends (in order), after which the connection still works."""

    id: str
    setup: Setup
    send: bytes
    responses: tuple[bytes, ...] = ()


ACCEPTED: list[Accepted] = [
    Accepted(
        "identify_unknown_keys",
        Setup.INIT,
        identify(
            {
                "short_id": "s",
                "long_id": "l",
                "topology_region": "r",
                "topology_zone": "z",
                "made_up": {"a": [1]},
            }
        ),
        (b"OK",),
    ),
    Accepted("identify_empty_object", Setup.INIT, identify({}), (b"OK",)),
    Accepted(
        "identify_lowest_values",
        Setup.INIT,
        identify(
            {
                "heartbeat_interval": 1000,
                "output_buffer_size": 64,
                "output_buffer_timeout": 25,
                "sample_rate": 0,
                "msg_timeout": 1000,
            }
        ),
        (b"OK",),
    ),
    Accepted(
        "identify_highest_values",
        Setup.INIT,
        identify(
            {
                "heartbeat_interval": 60_000,
                "output_buffer_size": 65_536,
                "output_buffer_timeout": 30_000,
                "sample_rate": 99,
                "msg_timeout": 900_000,
            }
        ),
        (b"OK",),
    ),
    Accepted(
        "identify_minus_one_disables",
        Setup.INIT,
        identify({"heartbeat_interval": -1, "output_buffer_size": -1, "output_buffer_timeout": -1}),
        (b"OK",),
    ),
    Accepted(
        "identify_zero_means_default",
        Setup.INIT,
        identify(
            {
                "heartbeat_interval": 0,
                "output_buffer_size": 0,
                "output_buffer_timeout": 0,
                "sample_rate": 0,
                "msg_timeout": 0,
                "deflate_level": 0,
            }
        ),
        (b"OK",),
    ),
    Accepted(
        "identify_null_integers",
        Setup.INIT,
        identify({"heartbeat_interval": None, "sample_rate": None, "msg_timeout": None}),
        (b"OK",),
    ),
    Accepted(
        "identify_null_strings_and_bools",
        Setup.INIT,
        identify({"client_id": None, "hostname": None, "feature_negotiation": None, "tls_v1": None}),
        (b"OK",),
    ),
    Accepted("identify_null_body", Setup.INIT, b"IDENTIFY\n" + body(b"null"), (b"OK",)),
    Accepted("identify_twice", Setup.INIT, identify({}) + identify({"client_id": "again"}), (b"OK", b"OK")),
    Accepted("identify_extra_param", Setup.INIT, b"IDENTIFY extra\n" + body(b"{}"), (b"OK",)),
    Accepted("nop_extra_param", Setup.INIT, b"NOP extra\n"),
    Accepted("pub_extra_param", Setup.INIT, b"PUB acc extra\n" + body(b"m"), (b"OK",)),
    Accepted("pub_max_size", Setup.INIT, b"PUB acc\n" + body(b"x" * MAX_MSG), (b"OK",)),
    Accepted(  # 4 + 4 * (4 + 1019) = 4096 = max-body-size
        "mpub_max_body",
        Setup.INIT,
        mpub(b"acc", *[element(b"y" * 1019)] * 4),
        (b"OK",),
    ),
    Accepted("dpub_zero", Setup.INIT, b"DPUB acc 0\n" + body(b"m"), (b"OK",)),
    Accepted("dpub_empty_timeout", Setup.INIT, b"DPUB acc \n" + body(b"m"), (b"OK",)),
    Accepted("dpub_max_timeout", Setup.INIT, f"DPUB acc {MAX_REQ_MS}\n".encode() + body(b"m"), (b"OK",)),
    Accepted("pub_heartbeats_disabled", Setup.HB_OFF, b"PUB acc\n" + body(b"m"), (b"OK",)),
    Accepted("sub_extra_param", Setup.INIT, b"SUB acc extra_param#ephemeral extra\n", (b"OK",)),
    Accepted("sub_64_byte_names", Setup.INIT, b"SUB " + b"T" * 64 + b" " + b"C" * 64 + b"\n", (b"OK",)),
    Accepted(
        "sub_64_byte_ephemeral_names",
        Setup.INIT,
        b"SUB " + b"t" * 54 + b"#ephemeral " + b"c" * 54 + b"#ephemeral\n",
        (b"OK",),
    ),
    Accepted("sub_punctuation_names", Setup.INIT, b"SUB .-_ _.-#ephemeral\n", (b"OK",)),
    Accepted("pub_64_byte_topic", Setup.INIT, b"PUB " + b"P" * 64 + b"\n" + body(b"m"), (b"OK",)),
    Accepted("mpub_ephemeral_topic", Setup.INIT, mpub(b"acc#ephemeral", element(b"m")), (b"OK",)),
    Accepted("rdy_no_param", Setup.SUBSCRIBED, b"RDY\n"),
    Accepted("rdy_empty_param", Setup.SUBSCRIBED, b"RDY \n"),
    Accepted("rdy_extra_param", Setup.SUBSCRIBED, b"RDY 1 extra\n"),
    Accepted("rdy_zero", Setup.SUBSCRIBED, b"RDY 0\n"),
    Accepted("rdy_max", Setup.SUBSCRIBED, f"RDY {MAX_RDY}\n".encode()),
    Accepted("pub_while_subscribed", Setup.SUBSCRIBED, b"PUB acc\n" + body(b"m"), (b"OK",)),
    Accepted("cls_extra_param", Setup.SUBSCRIBED, b"CLS extra\n", (b"CLOSE_WAIT",)),
    # after CLS nsqd ignores RDY entirely, even one it could not parse or would refuse
    Accepted("rdy_ignored_when_closing", Setup.CLOSING, f"RDY {MAX_RDY + 100}\n".encode()),
    Accepted("rdy_garbage_ignored_when_closing", Setup.CLOSING, b"RDY abc\n"),
    Accepted("pub_while_closing", Setup.CLOSING, b"PUB acc\n" + body(b"m"), (b"OK",)),
]
