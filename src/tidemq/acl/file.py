"""Reading ``plain_acl.yml`` (Java's 4.x plain ACL file) without a YAML dependency.

The file format needs only a small part of YAML: block mappings and sequences by indentation, plain or
quoted scalars, ``[a, b]`` flow lists and comments. This module reads exactly that part and refuses the
rest (anchors, tags, block scalars, flow mappings, tabs) with the line number, so a file it accepts means
the same to it as to Java's snakeyaml, and a typo is reported where it is rather than silently ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tidemq.acl.address import address_matcher

YamlValue = str | None | list["YamlValue"] | dict[str, "YamlValue"]

_KEY = re.compile(r"^([A-Za-z_][\w.-]*)\s*:(?:\s+(.*))?$")
_REFUSED_START = {
    "&": "anchors",
    "*": "aliases (quote the value: '*')",
    "!": "tags",
    "{": "flow mappings",
    "|": "block scalars",
    ">": "block scalars",
    "%": "directives",
    "@": "reserved characters",
    "`": "reserved characters",
}


class AclFileError(ValueError):
    """The ACL file cannot be used; ``line`` is 1-based, 0 when the problem is not on one line."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}" if line else message)
        self.line = line
        self.message = message


@dataclass(slots=True)
class _Line:
    number: int
    indent: int
    text: str

    @property
    def is_item(self) -> bool:
        return self.text == "-" or self.text.startswith("- ")


def _strip_comment(text: str, number: int) -> str:
    """Drop a ``#`` comment (at the start or after a blank) outside quotes."""
    quote = ""
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"" and (i == 0 or text[i - 1] in " :-[,"):
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1] in " \t"):
            return text[:i].rstrip()
    if quote:
        raise AclFileError(number, "unterminated quoted value")
    return text.rstrip()


def _lines(source: str) -> list[_Line]:
    out = []
    for number, raw in enumerate(source.splitlines(), 1):
        stripped = raw.lstrip(" ")
        if stripped.startswith("\t") or ("\t" in raw[: len(raw) - len(stripped) + 1] and stripped):
            raise AclFileError(number, "tabs are not allowed for indentation")
        text = _strip_comment(stripped, number)
        if not text:
            continue
        if text in ("---", "..."):
            raise AclFileError(number, "document markers are not supported")
        out.append(_Line(number, len(raw) - len(stripped), text))
    return out


def _scalar(text: str, number: int) -> YamlValue:
    if not text or text in ("~", "null", "Null", "NULL"):
        return None
    if text[0] in "'\"":
        quote = text[0]
        if len(text) < 2 or text[-1] != quote:
            raise AclFileError(number, f"text after the closing quote in {text!r}")
        inner = text[1:-1]
        if quote == "'":
            return inner.replace("''", "'")
        if "\\" in inner:
            raise AclFileError(number, "escapes in double-quoted values are not supported")
        return inner
    if text[0] == "[":
        if not text.endswith("]"):
            raise AclFileError(number, f"unterminated flow list {text!r}")
        inner = text[1:-1].strip()
        return [] if not inner else [_scalar(part.strip(), number) for part in inner.split(",")]
    if text[0] in _REFUSED_START:
        raise AclFileError(number, f"{_REFUSED_START[text[0]]} are not supported: {text!r}")
    if ": " in text or text.endswith(":"):
        raise AclFileError(number, f"a mapping is not allowed here: {text!r}")
    return text


class _Parser:
    def __init__(self, lines: list[_Line]) -> None:
        self.lines = lines
        self.i = 0

    def block(self, indent: int) -> YamlValue:
        line = self.lines[self.i]
        return self.sequence(indent) if line.is_item else self.mapping(indent)

    def mapping(self, indent: int) -> dict[str, YamlValue]:
        out: dict[str, YamlValue] = {}
        while self.i < len(self.lines):
            line = self.lines[self.i]
            if line.indent < indent or (line.indent == indent and line.is_item):
                break
            if line.indent > indent:
                raise AclFileError(line.number, "unexpected indentation")
            match = _KEY.match(line.text)
            if match is None:
                raise AclFileError(line.number, f"expected 'key: value', got {line.text!r}")
            key, rest = match.group(1), match.group(2)
            if key in out:
                raise AclFileError(line.number, f"duplicate key {key!r}")
            self.i += 1
            if rest:
                out[key] = _scalar(rest, line.number)
            elif self.i < len(self.lines) and (
                self.lines[self.i].indent > indent
                or (self.lines[self.i].indent == indent and self.lines[self.i].is_item)
            ):
                out[key] = self.block(self.lines[self.i].indent)
            else:
                out[key] = None
        return out

    def sequence(self, indent: int) -> list[YamlValue]:
        out: list[YamlValue] = []
        while self.i < len(self.lines):
            line = self.lines[self.i]
            if line.indent < indent or (line.indent == indent and not line.is_item):
                break
            if line.indent > indent:
                raise AclFileError(line.number, "unexpected indentation")
            rest = line.text[1:].lstrip(" ")
            if not rest:
                self.i += 1
                nested = self.i < len(self.lines) and self.lines[self.i].indent > indent
                out.append(self.block(self.lines[self.i].indent) if nested else None)
            elif _KEY.match(rest):
                # "- key: value" opens a mapping whose keys line up with this first one.
                item_indent = indent + len(line.text) - len(rest)
                self.lines[self.i] = _Line(line.number, item_indent, rest)
                out.append(self.mapping(item_indent))
            else:
                self.i += 1
                out.append(_scalar(rest, line.number))
        return out


def parse_yaml_subset(source: str) -> YamlValue:
    """Parse the YAML subset described in the module docstring; ``None`` for an empty document."""
    lines = _lines(source)
    if not lines:
        return None
    parser = _Parser(lines)
    value = parser.block(lines[0].indent)
    if parser.i < len(lines):
        raise AclFileError(lines[parser.i].number, "unexpected indentation")
    return value


# --- the plain_acl.yml schema ------------------------------------------------------------------------


@dataclass(slots=True)
class AccountConfig:
    """One ``accounts`` entry, as written (permissions still as text: Java parses them the same way)."""

    access_key: str
    secret_key: str
    white_remote_address: str = ""
    admin: bool = False
    default_topic_perm: str = "DENY"
    default_group_perm: str = "DENY"
    topic_perms: list[str] = field(default_factory=list)
    group_perms: list[str] = field(default_factory=list)
    line: int = 0


@dataclass(slots=True)
class AclFileConfig:
    global_white_remote_addresses: list[str] = field(default_factory=list)
    accounts: list[AccountConfig] = field(default_factory=list)


_ACCOUNT_KEYS = {
    "accessKey": "access_key",
    "secretKey": "secret_key",
    "whiteRemoteAddress": "white_remote_address",
    "admin": "admin",
    "defaultTopicPerm": "default_topic_perm",
    "defaultGroupPerm": "default_group_perm",
    "topicPerms": "topic_perms",
    "groupPerms": "group_perms",
}
_PERMS = {"DENY", "PUB", "SUB", "PUB|SUB", "SUB|PUB"}
_TOP_KEYS = ("globalWhiteRemoteAddresses", "accounts", "dataVersion")


def _key_lines(source: str) -> dict[tuple[int, str], int]:
    """Line numbers of account keys, for errors found after parsing: (account index, key) -> line."""
    out: dict[tuple[int, str], int] = {}
    account = -1
    in_accounts = False
    for line in _lines(source):
        if line.indent == 0 and not line.is_item:
            in_accounts = line.text.startswith("accounts")
            continue
        if not in_accounts:
            continue
        text = line.text
        if line.is_item and _KEY.match(text[1:].lstrip(" ")):
            account += 1
            text = text[1:].lstrip(" ")
        match = _KEY.match(text)
        if match and account >= 0:
            out.setdefault((account, match.group(1)), line.number)
    return out


def load_acl_config(source: str) -> AclFileConfig:
    """Parse and check a plain ACL file; every error names its line."""
    doc = parse_yaml_subset(source)
    if doc is None:
        return AclFileConfig()
    if not isinstance(doc, dict):
        raise AclFileError(1, "the file must be a mapping of globalWhiteRemoteAddresses and accounts")
    lines = _key_lines(source)
    top_lines = {ln.text.split(":", 1)[0]: ln.number for ln in _lines(source) if ln.indent == 0}
    for key in doc:
        if key not in _TOP_KEYS:
            raise AclFileError(top_lines.get(key, 0), f"unknown key {key!r}")
    config = AclFileConfig()
    config.global_white_remote_addresses = _string_list(
        doc.get("globalWhiteRemoteAddresses"), top_lines.get("globalWhiteRemoteAddresses", 0)
    )
    for pattern in config.global_white_remote_addresses:
        _check_address(pattern, top_lines.get("globalWhiteRemoteAddresses", 0))
    accounts = doc.get("accounts")
    if accounts is None:
        return config
    if not isinstance(accounts, list):
        raise AclFileError(top_lines.get("accounts", 0), "accounts must be a list")
    seen: set[str] = set()
    for index, entry in enumerate(accounts):
        line = lines.get((index, next(iter(entry), "")), 0) if isinstance(entry, dict) else 0
        account = _account(entry, index, lines, line or top_lines.get("accounts", 0))
        if account.access_key in seen:
            raise AclFileError(account.line, f"duplicate accessKey {account.access_key!r}")
        seen.add(account.access_key)
        config.accounts.append(account)
    return config


def _account(entry: YamlValue, index: int, lines: dict[tuple[int, str], int], line: int) -> AccountConfig:
    if not isinstance(entry, dict):
        raise AclFileError(line, "each account must be a mapping of accessKey, secretKey, ...")
    values: dict[str, object] = {"line": line}
    for key, value in entry.items():
        key_line = lines.get((index, key), line)
        attr = _ACCOUNT_KEYS.get(key)
        if attr is None:
            raise AclFileError(key_line, f"unknown account key {key!r}")
        if attr in ("topic_perms", "group_perms"):
            items = _string_list(value, key_line)
            for item in items:
                name, sep, perm = item.partition("=")
                if not sep or not name.strip() or "=" in perm:
                    raise AclFileError(key_line, f"{key} entry {item!r} is not 'name=PERM'")
                _check_perm(perm.strip(), key_line, key)
            values[attr] = items
        elif attr == "admin":
            if value not in ("true", "false", "True", "False", "TRUE", "FALSE", None):
                raise AclFileError(key_line, f"admin must be true or false, not {value!r}")
            values[attr] = str(value).lower() == "true"
        else:
            if isinstance(value, list | dict):
                raise AclFileError(key_line, f"{key} must be a single value")
            values[attr] = "" if value is None else value
            if attr == "white_remote_address" and value is not None:
                _check_address(str(value), key_line)
            if attr.startswith("default_") and value is not None:
                _check_perm(str(value), key_line, key)
    for required in ("access_key", "secret_key"):
        if not values.get(required):
            name = next(k for k, v in _ACCOUNT_KEYS.items() if v == required)
            raise AclFileError(line, f"account {index + 1} has no {name}")
    if len(str(values["access_key"])) < 6 or len(str(values["secret_key"])) < 6:
        # Java's AclUtils checks the same: keys shorter than 6 characters are refused.
        raise AclFileError(line, "accessKey and secretKey must be at least 6 characters")
    return AccountConfig(**values)  # type: ignore[arg-type]


def _check_address(pattern: str, line: int) -> None:
    try:
        address_matcher(pattern)
    except ValueError as exc:
        raise AclFileError(line, str(exc)) from None


def _check_perm(perm: str, line: int, key: str) -> None:
    if perm not in _PERMS:
        raise AclFileError(line, f"{key}: unknown permission {perm!r} (DENY, PUB, SUB or PUB|SUB)")


def _string_list(value: YamlValue, line: int) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise AclFileError(line, "expected a list of values")
    return [v for v in value if isinstance(v, str)]
