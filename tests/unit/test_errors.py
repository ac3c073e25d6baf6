"""Errors as data: the code table comes from the classes, field and rule travel as fields."""

from __future__ import annotations

import pytest

from schemas import ddl
from schemas.errors import (
    ERROR_CLASSES,
    AliasNotFound,
    CollectionNotFound,
    InvalidParameter,
    OspreyError,
    RequestTimeout,
    ServiceUnavailable,
    from_error_status,
    from_status,
)


def _all_subclasses(cls: type[OspreyError]) -> set[type[OspreyError]]:
    found = set()
    for sub in cls.__subclasses__():
        found |= {sub, *_all_subclasses(sub)}
    return found


def test_every_class_with_its_own_code_is_in_the_table() -> None:
    own_code = {c for c in _all_subclasses(OspreyError) if "code" in c.__dict__} | {OspreyError}
    assert {ERROR_CLASSES[c.code] for c in own_code} == own_code
    assert ERROR_CLASSES[1100] is InvalidParameter and ERROR_CLASSES[2] is ServiceUnavailable


def test_a_second_class_cannot_take_a_code() -> None:
    with pytest.raises(TypeError, match="already CollectionNotFound"):

        class Clash(OspreyError):  # pragma: no cover - the class statement itself raises
            code = CollectionNotFound.code


def test_field_and_rule_survive_a_round_trip_without_parsing_the_text() -> None:
    err = InvalidParameter("fields[0].name", "must be [a-z] only (no ] or [)", "x]y")
    status = err.status()
    assert (status.code, status.field, status.rule) == (1100, "fields[0].name", "must be [a-z] only (no ] or [)")
    rebuilt = from_error_status(status)
    assert isinstance(rebuilt, InvalidParameter)
    assert (rebuilt.field, rebuilt.rule, rebuilt.reason) == (err.field, err.rule, err.reason)
    # the reply carries them as fields of their own, whatever the text says
    reply = ddl.ErrorReply(request_id=1, proxy_id=2, code=1100, reason="free text", field="f", rule="r")
    again = from_status(reply.code, reply.reason, reply.field, reply.rule)
    assert (again.field, again.rule, again.reason) == ("f", "r", "free text")


def test_retriable_flags() -> None:
    assert ServiceUnavailable("broker down").retriable and ServiceUnavailable("x").status().retriable
    assert not RequestTimeout("no reply").retriable  # published: a resend would be a second request
    assert not InvalidParameter("a", "b").retriable and not AliasNotFound("z").retriable


def test_an_unknown_code_keeps_its_text() -> None:
    err = from_status(4242, "something new")
    assert type(err) is OspreyError and err.reason == "something new" and err.code == OspreyError.code


def test_milvus_text_leads_the_reason_and_survives_a_round_trip() -> None:
    """Milvus's own words first (its users match them), Osprey's field and rule after, as data."""
    err = InvalidParameter("collection_name", "must name a collection", "z", milvus_text="cannot drop via alias = z")
    assert (
        err.reason
        == "cannot drop via alias = z: invalid parameter[field=collection_name][rule=must name a collection]: got 'z'"
    )
    assert (err.field, err.rule, err.code) == ("collection_name", "must name a collection", 1100)
    rebuilt = from_error_status(err.status())
    assert isinstance(rebuilt, InvalidParameter)
    assert (rebuilt.reason, rebuilt.field, rebuilt.rule) == (err.reason, err.field, err.rule)
    assert InvalidParameter("f", "r").reason == "invalid parameter[field=f][rule=r]"  # no Milvus text: as before
