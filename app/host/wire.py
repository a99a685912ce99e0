"""The objects the parent and the engine host exchange, as JSON: a job's settings, the pair's
costs, a job's result (app.host.protocol). A class's instance is a JSON object tagged with
the class's name under TAG; only the classes in ALLOWED are ever built from one, so a line
on the host's stdout can name data, never code.

A dataclass is written as its fields and read back field by field, each checked against the
field's type; a class with a dict format of its own (DecodeConfig, DrafterChoice, ...) is
written in it, which also restores its tuples, deques and int keys. numpy scalars become Python
numbers. Anything else, on either side, is a WireError.
"""

from __future__ import annotations

import dataclasses
import functools
import types
from collections.abc import Callable
from typing import Any, Union, get_args, get_origin, get_type_hints

import numpy as np

from app.analysis.exact_report import ExactReport, GreedySuite
from app.analysis.rank import (
    DraftModelCandidate,
    LoadedCandidate,
    NgramCandidate,
    RankRow,
    SelfDraftCandidate,
)
from app.analysis.sweep import SweepRow
from app.engine.decode_config import DecodeConfig, DrafterChoice, choice_from_dict, choice_to_dict
from app.errors import DraftLensError
from app.host.protocol import config_from_dict, config_to_dict

TAG = "__type__"


class WireError(DraftLensError):
    """A message that is not what the protocol carries: an unknown type, a malformed object,
    a value no JSON can hold."""


# the only classes a message may name
ALLOWED: dict[str, type] = {cls.__name__: cls for cls in (
    SweepRow, RankRow, ExactReport, GreedySuite,
    DecodeConfig, DrafterChoice,
    DraftModelCandidate, NgramCandidate, LoadedCandidate, SelfDraftCandidate)}
_NAMES = {cls: name for name, cls in ALLOWED.items()}

# classes written in a dict format of their own, not as their dataclass fields: (out, in)
_FORMATS: dict[type, tuple[Callable[[Any], dict[str, Any]], Callable[[dict[str, Any]], Any]]] = {
    DecodeConfig: (config_to_dict, config_from_dict),
    DrafterChoice: (choice_to_dict, choice_from_dict),
    GreedySuite: (GreedySuite.to_dict, GreedySuite.from_dict),
    DraftModelCandidate: (lambda c: {"path": c.path, "cross": c.cross},
                          lambda d: DraftModelCandidate(d["path"], d["cross"])),
    NgramCandidate: (lambda c: {}, lambda d: NgramCandidate()),
    LoadedCandidate: (lambda c: {"label": c.label, "choice": choice_to_dict(c.choice)},
                      lambda d: LoadedCandidate(d["label"], choice_from_dict(d["choice"]))),
    SelfDraftCandidate: (lambda c: {"skip": c.skip},
                         lambda d: SelfDraftCandidate(str(d["skip"]))),
}


def encode(value: Any) -> Any:
    """`value` as JSON-ready data (dicts, lists, str, numbers, bool, None)."""
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        if TAG in value or not all(isinstance(k, str) for k in value):
            raise WireError("a dict on the wire needs str keys and no "
                            f"{TAG!r}: {list(value)[:5]!r}")
        return {k: encode(v) for k, v in value.items()}
    name = _NAMES.get(type(value))
    if name is None:
        raise WireError(f"{type(value).__name__} is not an object the protocol carries")
    form = _FORMATS.get(type(value))
    data = form[0](value) if form else {f.name: getattr(value, f.name)
                                        for f in dataclasses.fields(value)}
    return {TAG: name, **encode(data)}


def decode(data: Any, expect: type | tuple[type, ...] = object) -> Any:
    """What `encode` wrote (after a JSON round trip), if it is an `expect`."""
    value = _decode(data)
    if not isinstance(value, expect):
        raise WireError(f"expected {_name(expect)} on the wire, got {type(value).__name__}")
    return value


def _decode(data: Any) -> Any:
    if isinstance(data, list):
        return [_decode(v) for v in data]
    if not isinstance(data, dict):
        return data
    if TAG not in data:
        return {k: _decode(v) for k, v in data.items()}
    name = data[TAG]
    cls = ALLOWED.get(name) if isinstance(name, str) else None
    if cls is None:
        raise WireError(f"unknown type {name!r} on the wire: the protocol carries no such "
                        "object")
    body = {k: v for k, v in data.items() if k != TAG}
    form = _FORMATS.get(cls)
    try:
        return form[1](body) if form else _from_fields(cls, body)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise WireError(f"a malformed {name} on the wire: {exc}") from exc


def _from_fields(cls: type, body: dict[str, Any]) -> Any:
    hints = _field_types(cls)
    unknown = set(body) - set(hints)
    if unknown:
        raise WireError(f"{cls.__name__} has no field {', '.join(sorted(unknown))}")
    return cls(**{k: _conform(_decode(v), hints[k], f"{cls.__name__}.{k}")
                  for k, v in body.items()})


@functools.cache
def _field_types(cls: type) -> dict[str, Any]:
    hints = get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _conform(value: Any, hint: Any, where: str) -> Any:
    """`value` if a field of type `hint` may hold it, else a WireError. (The classes written
    as their fields hold numbers, str, bool, None, lists and one another: a tuple or a dict
    field would need a case here.)"""
    origin, args = get_origin(hint), get_args(hint)
    if origin in (Union, types.UnionType):
        for option in args:
            try:
                return _conform(value, option, where)
            except WireError:
                pass
    elif origin is list and isinstance(value, list):
        return [_conform(v, args[0], where) for v in value]
    elif hint is float and isinstance(value, int):
        return value
    elif origin is None and isinstance(hint, type) and isinstance(value, hint):
        return value
    raise WireError(f"{where} should be {_name(hint)}, not {value!r:.80}")


def _name(kind: Any) -> str:
    if isinstance(kind, tuple):
        return " or ".join(_name(k) for k in kind)
    return kind.__name__ if isinstance(kind, type) else str(kind)
