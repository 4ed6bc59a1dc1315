"""A frozen dataclass as its JSON object, by its fields (stdlib only).

Most records' ``to_json`` is their fields by name, in declared order: :func:`fields_json` is that rule
once, so a field added to a record is in its JSON without a second list to keep in step, and the few
keys a record words otherwise are named where it builds its JSON.
"""

from __future__ import annotations

from dataclasses import fields
from functools import cache
from typing import Any


@cache
def field_names(cls: type) -> tuple[str, ...]:
    """The dataclass ``cls``'s field names, in declared order (cached: a JSON document asks per record)."""
    return tuple(f.name for f in fields(cls))


def class_of(obj: object) -> Any:
    """``type(obj)`` as :func:`field_names`'s key: a class is hashable, though mypy reads the ``__hash__``
    a frozen dataclass gives its instances as the class's own."""
    return type(obj)


def fields_json(obj: object, *, omit: tuple[str, ...] = (), **values: Any) -> dict[str, Any]:
    """``obj``'s fields by name in declared order, a tuple as a list (a shallow copy, as ``asdict``
    without its recursion): those in ``omit`` left out, ``values`` in place of the fields of their
    names, and any other of ``values`` after them."""
    out: dict[str, Any] = {}
    for name in field_names(class_of(obj)):
        if name in omit:
            continue
        v = values[name] if name in values else getattr(obj, name)
        out[name] = list(v) if type(v) is tuple else v
    for name, v in values.items():
        out.setdefault(name, v)
    return out
