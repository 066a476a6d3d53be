"""Question files as releases and people write them: the top-level JSON form is detected, not assumed.

Read as rows, each with where it came from:
- JSON Lines (one object a line; the releases' form): `file:line`; a bad line is that row's problem only;
- one JSON array of objects (one line or indented): `file[i]`;
- one object of questions keyed by id (`{"<qid>": {...}}`; the key fills the id field when the row lacks
  it): `file[<qid>]`;
- one object wrapping the list (`{"questions": [...], "version": ...}`: the one value that is a list of
  objects): `file[i]`.
Anything else (a number, a list of strings, a truncated array, bytes that are not UTF-8) is a
`QAFileError` naming the file and the problem in one line: the caller fails that file, never 50 lines
of "malformed question" for a file that was never JSON Lines.

What a file may cost is bounded (manifests/limits.py): a file over `json_max_bytes` (or not a regular file) is
refused before it is parsed, and nesting deeper than `json_max_depth` is measured before `json.loads` (whose
recursion would end the run): a file nested too deep is a `QAFileError`, one such line among JSON Lines that
line's problem only.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from manifests import limits

FORMS = "JSON Lines, a JSON array of questions or a JSON object of questions"


class QAFileError(ValueError):
    """The file as a whole is not questions in any form read here; the message names it."""


class TooDeep(json.JSONDecodeError):
    """JSON nested deeper than the limit: refused before parsing, like any other JSON that cannot be read."""


# a JSON string on one line (JSON strings hold no raw newline, so a broken one cannot swallow later lines)
_STRING = re.compile(r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = np.zeros(256, dtype=np.int64)
_STEP[[ord("["), ord("{")]], _STEP[[ord("]"), ord("}")]] = 1, -1


def nesting_depth(text: str, limit: int) -> tuple[int, int]:
    """(deepest nesting of arrays and objects, brackets in strings aside; where in `text` it first goes past
    `limit`, 0 when it does not)."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    if not brackets:
        return 0, 0
    depth = np.cumsum(_STEP[np.frombuffer(brackets.encode("ascii"), dtype=np.uint8)])
    deepest = int(depth.max())
    return deepest, _nth_bracket(text, int((depth > limit).argmax())) if deepest > limit else 0


def _nth_bracket(text: str, n: int) -> int:
    """The position in `text` of its n-th bracket outside strings (0-based), for the error's line and column."""
    seen, pos = -1, 0
    for m in re.finditer(_STRING.pattern + r"|[\[\]{}]", text):
        if m.group()[0] != '"':
            seen += 1
            if seen == n:
                return m.start()
        pos = m.end()
    return pos


def loads(text: str) -> Any:
    """json.loads with the nesting of the run's limits checked first; TooDeep (a JSONDecodeError) beyond it."""
    limit = limits.current().json_max_depth
    depth, pos = nesting_depth(text, limit)
    if depth <= limit:
        try:
            return json.loads(text)
        except RecursionError:  # the scan and the parser disagree on a malformed text: still not data
            pass
    raise TooDeep(f"nested {depth} levels deep, over the limit of {limit} (limits.json_max_depth in the run "
                  "config)", text, pos)


def read_json_text(path: Path, what: str = "JSON file") -> str:
    """The file's text (UTF-8, a byte-order mark dropped), at most `json_max_bytes` of it; InputTooLarge or
    UnicodeDecodeError otherwise."""
    raw = limits.read_bounded(path, limits.current().json_max_bytes, what, "json_max_bytes")
    return raw.decode("utf-8-sig")


@dataclass(frozen=True)
class Row:
    value: Any  # the parsed row, or the json.JSONDecodeError of its line (JSON Lines only)
    where: str  # file:line, file[i] or file[key]
    n: int  # 1-based line (JSON Lines) or position: ids made up for rows without one use it
    label: str = ""  # "line 3", "entry 3" or the key: names a row that has no id of its own

    def parsed(self) -> Any:
        """The row; raises its line's JSONDecodeError (a ValueError) when it had none."""
        if isinstance(self.value, json.JSONDecodeError):
            raise self.value
        return self.value


def _kind(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number")


def json_rows(path: Path, id_field: str | None = "qid") -> list[Row]:
    """The rows of a question file in any of the forms above; QAFileError when it is none of them."""
    try:
        text = read_json_text(path, "question file")  # a byte-order mark (some editors write one) is not JSON
    except UnicodeDecodeError as e:
        raise QAFileError(f"{path}: not UTF-8 text (byte {e.start}); expected {FORMS}") from None
    except (limits.InputTooLarge, OSError) as e:
        raise QAFileError(str(e) if str(path) in str(e) else f"{path}: {e}") from None
    try:
        doc = loads(text)
    except json.JSONDecodeError as whole:
        return _lines(path, text, whole)
    return _document(path, doc, id_field)


def _lines(path: Path, text: str, whole: json.JSONDecodeError) -> list[Row]:
    """JSON Lines, but only when the first row is an object on its line: a broken array or object spread
    over lines is one error of the file, not one per line."""
    rows = []
    for line_no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            value: Any = loads(line)
        except json.JSONDecodeError as e:
            value = e
        if not rows and isinstance(whole, TooDeep) and isinstance(value, TooDeep):
            raise QAFileError(f"{path}: {whole.msg} at line {whole.lineno}, column {whole.colno}; "
                              f"expected {FORMS}")
        if not rows and not isinstance(value, dict):
            raise QAFileError(f"{path}: not valid JSON ({whole.msg} at line {whole.lineno}, column {whole.colno}) "
                              f"and not JSON Lines (line {line_no} is not a JSON object); expected {FORMS}")
        rows.append(Row(value, f"{path}:{line_no}", line_no, f"line {line_no}"))
    return rows


def _document(path: Path, doc: Any, id_field: str | None) -> list[Row]:
    if isinstance(doc, list):
        return _array(path, doc, "")
    if not isinstance(doc, dict):
        raise QAFileError(f"{path}: the file holds {_kind(doc)}, not questions; expected {FORMS}")
    if not any(isinstance(v, dict | list) for v in doc.values()):
        return [Row(doc, f"{path}:1", 1, "line 1")]  # JSON Lines with one question
    if doc and all(isinstance(v, dict) for v in doc.values()):  # keyed by id
        return [Row({id_field: key, **v} if id_field and id_field not in v else v, f"{path}[{key!r}]", n, key)
                for n, (key, v) in enumerate(doc.items(), 1)]
    lists = [(k, v) for k, v in doc.items() if isinstance(v, list) and v and all(isinstance(x, dict) for x in v)]
    if len(lists) == 1:
        return _array(path, lists[0][1], f"[{lists[0][0]!r}]")
    raise QAFileError(f"{path}: an object that is neither one question, questions keyed by id, nor a wrapper "
                      f"of one list of questions (keys {sorted(doc)[:6]}); expected {FORMS}")


def _array(path: Path, values: list[Any], prefix: str) -> list[Row]:
    if values and not any(isinstance(v, dict) for v in values):
        raise QAFileError(f"{path}: an array of {type(values[0]).__name__} values, not of question objects; "
                          f"expected {FORMS}")
    return [Row(v, f"{path}{prefix}[{i}]", i + 1, f"entry {i + 1}") for i, v in enumerate(values)]
