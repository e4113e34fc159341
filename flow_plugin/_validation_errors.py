"""The one way a pydantic ``ValidationError`` of a file we read becomes a message: one phrase per
problem, naming the key (``resources.device``, ``seeds[1]``), what it must be and what it is, and
for an unknown key the closest known one.

>>> from pydantic import BaseModel, ConfigDict, ValidationError
>>> class Table(BaseModel):
...     model_config = ConfigDict(extra="forbid", strict=True)
...     seeds: list[int] = []
...     device: str = "cpu"
>>> try:
...     Table.model_validate({"seeds": [1, "2"], "devise": "gpu"})
... except ValidationError as error:
...     describe_validation_error(error, lambda location: list(Table.model_fields))
["key 'seeds[1]' must be int, got str '2'", "unknown key 'devise' (did you mean 'device'?)"]
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from typing import Any

#: pydantic's error types of a wrong type -> what the key must be
TYPE_NAMES = {"int_type": "int", "string_type": "str", "bool_type": "bool", "list_type": "a list",
              "tuple_type": "a list",  # (a TOML list, kept as a tuple by a frozen model)
              "dict_type": "a table", "model_type": "a table", "float_type": "a number"}


def key_name(location: Sequence[Any]) -> str:
    """A pydantic location as a key: ``('resources', 'device')`` -> ``resources.device``, ``('seeds', 1)`` -> ``seeds[1]``."""
    text = ""
    for part in location:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def describe_validation_error(error: Any, known_keys: Callable[[tuple[Any, ...]], list[str]], *,
                              ignore: Sequence[str] = (), special: dict[str, str] | None = None) -> list[str]:
    """One phrase per problem of ``error`` (a pydantic ``ValidationError``), without repeats.

    ``known_keys(location)`` lists the keys allowed where an unknown key was found (for the
    'did you mean' hint); ``ignore`` are location parts that name a branch of a union type
    (``"str"``, ``"list[int]"``) rather than a key; ``special`` maps a key to the phrase of a
    wrong type there (a union's 'must be str or a list of int')."""
    phrases: list[str] = []
    seen: set[str] = set()
    for item in error.errors(include_url=False):
        location = tuple(part for part in item["loc"] if not (isinstance(part, str) and part in ignore))
        key, kind = key_name(location), item["type"]
        if kind == "extra_forbidden":
            close = difflib.get_close_matches(str(location[-1]), known_keys(location), n=1)
            hint = f" (did you mean {key_name((*location[:-1], close[0]))!r}?)" if close else ""
            phrase = f"unknown key {key!r}{hint}"
        elif kind == "missing":
            phrase = f"missing required key {key!r}"
        elif key in seen:
            continue  # the other branch of a union said the same thing
        elif special and key in special and kind in TYPE_NAMES:
            phrase = special[key]
        elif kind in TYPE_NAMES:
            value = item.get("input")
            phrase = f"key {key!r} must be {TYPE_NAMES[kind]}, got {type(value).__name__} {value!r}"
        elif kind == "too_short" and item.get("ctx", {}).get("min_length") == 1:
            phrase = f"key {key!r} must not be empty"
        elif kind == "literal_error":
            phrase = f"key {key!r} must be one of {item['ctx']['expected']}, got {item.get('input')!r}"
        elif kind == "value_error":
            reason = str(item.get("ctx", {}).get("error") or item["msg"].removeprefix("Value error, "))
            phrase = f"key {key!r} {reason}" if reason.startswith("must") else f"key {key!r}: {reason}"
        else:
            phrase = f"key {key!r}: {item['msg']}" if key else str(item["msg"])
        seen.add(key)
        if phrase not in phrases:
            phrases.append(phrase)
    return phrases


__all__ = ["TYPE_NAMES", "describe_validation_error", "key_name"]
