"""Requests built from a contract path (``frontends/milvus_grpc/contract.py``): a request of an
RPC that sets one field, key or JSON key to a value other than its default. Shared by the
generated unit test (``tests/unit/test_milvus_contract.py``) and the test that sends every
refused field to a real proxy (``tests/integration/test_pymilvus_errors.py``)."""

from __future__ import annotations

import json
import re
from typing import Any

from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from frontends.milvus_grpc.contract import ANY_KEY, EMBEDDED, SERVICE

UNKNOWN_KEY = "osprey_test_unknown_key"


def _segments(path: str) -> list[str]:
    """``a[].b{k}.j`` -> ``["a[]", "b{k}", "j"]`` (a key may hold dots: ``{collection.ttl.seconds}``)."""
    return re.findall(r"[^.{]+(?:\[\])?(?:\{[^}]*\})?", path)


def _non_default(fd: FieldDescriptor) -> Any:
    """A value of ``fd``'s scalar type other than its default."""
    if fd.enum_type is not None:
        return next(v.number for v in fd.enum_type.values if v.number != 0)
    if fd.type == FieldDescriptor.TYPE_STRING:
        return "x"
    if fd.type == FieldDescriptor.TYPE_BYTES:
        return b"x"
    if fd.type == FieldDescriptor.TYPE_BOOL:
        return True
    if fd.type in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE):
        return 1.5
    return 7


def _touch(message: Message) -> None:
    """Set one scalar somewhere inside ``message`` (a refused subtree is then present)."""
    for fd in message.DESCRIPTOR.fields:
        if fd.message_type is None:
            _assign(message, fd, _non_default(fd))
            return
        if fd.message_type.GetOptions().map_entry:
            continue
        if fd.is_repeated:
            item = getattr(message, fd.name).add()
            _touch(item)
            if item.ListFields():
                return
            continue
        _touch(getattr(message, fd.name))
        if message.HasField(fd.name):
            return


def _assign(message: Message, fd: FieldDescriptor, value: Any) -> None:
    if fd.is_repeated:
        getattr(message, fd.name).append(value)
    else:
        setattr(message, fd.name, value)


def _kv_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def message_class(descriptor: Descriptor) -> type[Message]:
    return message_factory.GetMessageClass(descriptor)


def _set_path(message: Message, path: str, value: Any | None) -> str:
    """Set ``path`` inside ``message`` (to ``value``, or a non-default value); the concrete path an
    error names (``fields_data[0].valid_data``, ``load_params{x}``, ``search_params{params}.ef``)."""
    concrete: list[str] = []
    segments = _segments(path)
    for i, segment in enumerate(segments):
        last = i == len(segments) - 1
        name, key = segment, None
        if "{" in segment:
            name, key = segment[: segment.index("{")], segment[segment.index("{") + 1 : -1]
            key = UNKNOWN_KEY if key == ANY_KEY else key
        repeated = name.endswith("[]")
        name = name.removesuffix("[]")
        if key is not None:
            inner = None if last else segments[i + 1]
            inner = UNKNOWN_KEY if inner == ANY_KEY else inner
            fallback = 1 if inner is not None else "1"
            held = _kv_value({inner: fallback if value is None else value} if inner else (value or fallback))
            fd = message.DESCRIPTOR.fields_by_name[name]
            if fd.message_type.GetOptions().map_entry:
                entries = getattr(message, name)
                if fd.message_type.fields_by_name["value"].message_type is None:
                    entries[key] = held
                else:
                    _touch(entries[key])
            else:
                getattr(message, name).add(key=key, value=held)
            concrete.append(f"{name}{{{key}}}" + (f".{inner}" if inner else ""))
            break
        fd = message.DESCRIPTOR.fields_by_name[name]
        if fd.message_type is None:
            _assign(message, fd, _non_default(fd) if value is None else value)
            concrete.append(name)
            break
        repeated = repeated or fd.is_repeated
        child = getattr(message, name).add() if repeated else getattr(message, name)
        concrete.append(f"{name}[0]" if repeated else name)
        if last:
            _touch(child)
        message = child
    return ".".join(concrete)


def build_request(method: str, path: str, value: Any | None = None) -> tuple[Message, str]:
    """A ``method`` request with ``path`` set, and the concrete path an error names; a path into an
    embedded message (``schema.fields[].nullable``) is set in that message, serialized into its field."""
    request = message_class(SERVICE.methods_by_name[method].input_type)()
    first, _, rest = path.partition(".")
    embedded = EMBEDDED.get((method, first))
    if embedded is None:
        return request, _set_path(request, path, value)
    root = embedded()
    if rest:
        where = f"{first}.{_set_path(root, rest, value)}"
    else:
        _touch(root)
        where = first
    setattr(request, first, root.SerializeToString())
    return request, where
