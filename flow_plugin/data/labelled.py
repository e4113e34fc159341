"""Labelled text sets from files: the layouts a task of :mod:`flow_plugin.catalog.labelled_tasks` reads.

A *source* says where the rows of a set are and which field plays which *role*:

=========  ==========================================================================================
role       meaning
=========  ==========================================================================================
text       the input of a classification or clustering item (a list: several columns, each an item)
text1/2    the two sides of a pair (pair classification)
query      the question side of a (query, document, label) row (retrieval, reranking)
document   the passage side of such a row
label      the gold label (a list: one label per level, for hierarchical clustering)
=========  ==========================================================================================

Five layouts (``format``), each a pydantic model that forbids unknown keys:

``delimited``
    CSV or TSV files, one row per item; columns by header name or by 0-based index.
``lines-per-label``
    One file per label, one item per line (SentEval's MR, CR, SUBJ, MPQA); all rows form one split.
``aligned-lines``
    One file per role, line *i* of each file belonging to item *i* (``a.toks``/``b.toks``/``sim.txt``).
``regex-lines``
    One item per line, split into roles by a regular expression with named groups
    (``(?P<label>[^:]+):\\S+ (?P<text>.*)`` reads TREC).
``jsonl``
    One JSON object per line; roles by key.

A text role of ``delimited`` and ``jsonl`` may join several columns into one item:
``{ join = ["title", "description"], separator = ". " }`` (:class:`Joined`; empty parts are left out).

Every text is whitespace-normalised (runs of whitespace become one space, ends stripped: the token
string SentEval builds from the same line, so both routes encode the same strings) unless
``normalize_whitespace = false``. A label is mapped through ``label_map`` when one is given (an
unmapped label is an error naming it; a label mapped to ``"drop"`` drops its row, counted), or turned
into 1 or 0 by ``label_threshold`` (a number at or above it is 1: a graded score or a vote count as
relevance; a label that is not a number is an error naming it). Blank lines are skipped where a row is a
line; an empty text is an error naming the file and the line.

A ranking task whose relevance is a shared label reads its documents from a second source (the task's
``documents``, roles ``document`` and ``label``); :func:`attach_documents` puts them next to the queries'
columns of each split, their labels under :data:`DOCUMENT_LABEL`.

The result is a :class:`LabelledSplits`: split -> role -> values, in file order, plus the files read.
Nothing here imports MTEB.

Examples
--------
>>> import tempfile, pathlib
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> _ = (folder / "pos.txt").write_text("a  fine film\\ngreat fun\\n")
>>> _ = (folder / "neg.txt").write_text("dull\\n")
>>> source = parse_source({"format": "lines-per-label", "files": {"pos.txt": 1, "neg.txt": 0}})
>>> data = read_source(source, folder)
>>> data.splits["all"]["text"], data.splits["all"]["label"]
(['a fine film', 'great fun', 'dull'], [1, 1, 0])
"""

from __future__ import annotations

import codecs
import csv
import hashlib
import io
import json
import math
import os
import re
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator, model_validator

from flow_plugin._io import split_lines
from flow_plugin.errors import DataFolderError, InputError

#: the roles a source may fill, and what each means (docs/tasks.md lists them)
ROLES: tuple[str, ...] = ("text", "text1", "text2", "query", "document", "label")
#: the label_map value that drops a row instead of labelling it (Twitter URL Corpus' undecided pairs ...)
DROP = "drop"
#: the split name of a source that has no splits of its own (``lines-per-label``): a task's split rule divides it
WHOLE_SET = "all"
#: the column of a split that holds the labels of the documents read from a ranking task's ``documents`` source
#: (:func:`attach_documents`); a query's relevant documents are those that share one of its labels
DOCUMENT_LABEL = "document_label"

Label = Union[int, str]
Column = Union[int, str]
FileList = Union[str, list[str]]


class _Source(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    #: text encoding of the files (``utf-8-sig`` also reads a byte-order mark); SentEval reads TREC as latin-1
    encoding: str = "utf-8-sig"
    #: runs of whitespace -> one space, ends stripped (SentEval's token string)
    normalize_whitespace: bool = True
    #: raw label -> label (``"drop"``: leave the row out); None: labels as read (ints stay ints)
    label_map: dict[str, Label] | None = None
    #: a numeric label at or above it is 1, below it 0 (a graded score as relevance); None: labels as read
    label_threshold: float | None = None

    @field_validator("label_threshold")
    @classmethod
    def _finite_threshold(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError(f"label_threshold must be a finite number, got {value}")
        return value

    @model_validator(mode="after")
    def _one_label_rule(self) -> _Source:
        if self.label_map is not None and self.label_threshold is not None:
            raise ValueError("label_map and label_threshold both turn raw labels into labels: give one of them")
        return self

    @field_validator("encoding")
    @classmethod
    def _known_encoding(cls, value: str) -> str:
        try:
            codecs.lookup(value)
        except LookupError:
            raise ValueError(f"unknown text encoding {value!r}") from None
        return value


class Joined(BaseModel):
    """Several columns (or JSON keys) read as one text: their non-empty values joined by ``separator``
    (``{ join = ["title", "description"], separator = ". " }``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    join: list[Column] = Field(min_length=2)
    separator: str = " "


#: what a role reads: a column, several columns joined into one text, or a list of either (several items of a
#: clustering row, or the levels of a hierarchical label)
ColumnSpec = Union[Column, Joined, list[Union[Column, Joined]]]


def _label_not_joined(columns: Mapping[str, Any]) -> None:
    label = columns.get("label")
    if isinstance(label, Joined) or (isinstance(label, list) and any(isinstance(item, Joined) for item in label)):
        raise ValueError("the label cannot join columns (join is for text roles); map labels with label_map")


class DelimitedSource(_Source):
    """CSV/TSV files: ``splits = {split = file or [files]}``, ``columns = {role = name or index, or a join}``."""

    format: Literal["delimited"]
    splits: dict[str, FileList]
    columns: dict[str, ColumnSpec]
    delimiter: Literal[",", "\t", ";", "|"] = ","
    header: bool = True
    #: "csv": fields may be quoted ("a, b"); "none": quotes are text (TSV files such as MRPC's and GLUE's)
    quoting: Literal["csv", "none"] = "csv"

    @model_validator(mode="after")
    def _text_joins_only(self) -> DelimitedSource:
        _label_not_joined(self.columns)
        return self


class LinesPerLabelSource(_Source):
    """One file per label: ``files = {file = label}``; every line is one item of that label."""

    format: Literal["lines-per-label"]
    files: dict[str, Label]


class AlignedLinesSource(_Source):
    """One file per role: ``splits = {split = {role = file}}``; line i of each is item i."""

    format: Literal["aligned-lines"]
    splits: dict[str, dict[str, str]]


class RegexLinesSource(_Source):
    """One item per line: ``splits = {split = file or [files]}``, ``pattern`` with a named group per role."""

    format: Literal["regex-lines"]
    splits: dict[str, FileList]
    pattern: str

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            compiled = re.compile(value)
        except re.error as error:
            raise ValueError(f"pattern {value!r} is not a regular expression: {error}") from None
        unknown = sorted(set(compiled.groupindex) - set(ROLES))
        if unknown:
            raise ValueError(f"pattern groups {unknown} are not roles; roles: {', '.join(ROLES)}")
        return value


class JsonlSource(_Source):
    """JSON-lines files: ``splits = {split = file or [files]}``, ``columns = {role = key, or a join}``."""

    format: Literal["jsonl"]
    splits: dict[str, FileList]
    columns: dict[str, ColumnSpec]

    @model_validator(mode="after")
    def _text_joins_only(self) -> JsonlSource:
        _label_not_joined(self.columns)
        return self


Source = Annotated[Union[DelimitedSource, LinesPerLabelSource, AlignedLinesSource, RegexLinesSource, JsonlSource],
                   Field(discriminator="format")]
_SOURCE = TypeAdapter(Source)
FORMATS: tuple[str, ...] = ("delimited", "lines-per-label", "aligned-lines", "regex-lines", "jsonl")


def parse_source(table: Mapping[str, Any]) -> Source:
    """A source table (from TOML) validated into its model; errors name the bad keys."""
    if not isinstance(table, Mapping) or table.get("format") not in FORMATS:
        found = table.get("format") if isinstance(table, Mapping) else table
        raise InputError(f"source: 'format' must be one of {', '.join(FORMATS)}, got {found!r}")
    try:
        return _SOURCE.validate_python(dict(table))
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, item['loc'][1:])) or 'source'}: {item['msg']}"
                             for item in error.errors())
        raise InputError(f"source ({table['format']}): {problems}") from None


@dataclass
class LabelledSplits:
    """split -> role -> values (file order), the files read, and rows dropped by ``label_map``."""

    splits: dict[str, dict[str, list[Any]]]
    files: list[Path] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=dict)

    def roles(self) -> set[str]:
        return {role for columns in self.splits.values() for role in columns}

    def size(self, split: str) -> int:
        columns = self.splits[split]
        return len(next(iter(columns.values()))) if columns else 0


# ----------------------------------------------------------------------------- reading files
def resolve_file(name: str, base: Path) -> Path:
    """``name`` as a path: absolute as given, else relative to ``base``."""
    path = Path(name).expanduser()
    return path if path.is_absolute() else base / path


def read_lines(path: Path, encoding: str) -> list[str]:
    """The lines of a text file in ``encoding`` (line ends ``\\n`` or ``\\r\\n``; a BOM dropped with utf-8-sig)."""
    if not path.is_file():
        raise DataFolderError(f"data file {path} does not exist" if not path.exists() else f"{path} is not a file")
    try:
        text = path.read_bytes().decode(encoding)
    except UnicodeDecodeError as error:
        raise DataFolderError(f"{path}: not valid {encoding} at byte {error.start} ({error.reason}); set the "
                              "source's encoding (e.g. encoding = \"latin-1\")") from None
    except OSError as error:
        raise DataFolderError(f"cannot read {path}: {error.strerror or error}") from None
    return split_lines(text)


def _clean_text(value: Any, source: _Source, where: str) -> str:
    if not isinstance(value, str):
        raise DataFolderError(f"{where}: expected text, got {type(value).__name__} {value!r:.60}")
    text = " ".join(value.split()) if source.normalize_whitespace else value
    if not text.strip():
        raise DataFolderError(f"{where}: empty text; remove the row or fill it in")
    return text


def _clean_label(value: Any, source: _Source, where: str) -> Any:
    """The label after ``label_map`` (``DROP`` passes through to the caller); ints stay ints."""
    if isinstance(value, str):
        value = value.strip()
    if source.label_threshold is not None:
        return _thresholded(value, source.label_threshold, where)
    if source.label_map is None:
        if isinstance(value, str) and re.fullmatch(r"-?\d+", value):
            return int(value)
        if isinstance(value, (int, str)) and not isinstance(value, bool):
            return value
        raise DataFolderError(f"{where}: a label must be text or an integer, got {value!r:.60}")
    key = str(value)
    if key not in source.label_map:
        raise DataFolderError(f"{where}: label {key!r} is not in the source's label_map "
                              f"({', '.join(map(repr, source.label_map))}); add it (or map it to \"{DROP}\")")
    return source.label_map[key]


def _thresholded(value: Any, threshold: float, where: str) -> int:
    """1 if the label ``value`` is a number at or above ``threshold``, else 0; text that is not a number is an error."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if isinstance(value, bool) or not math.isfinite(number):
        raise DataFolderError(f"{where}: label {value!r:.60} is not a number, which the source's label_threshold "
                              f"({threshold:g}) needs; fix the row, or read the score column as the label")
    return int(number >= threshold)


def _add_row(columns: dict[str, list[Any]], row: dict[str, Any], source: _Source, where: str,
             dropped: list[int]) -> None:
    """Clean one row's roles and append them (or count it dropped)."""
    cleaned: dict[str, Any] = {}
    for role, value in row.items():
        if role == "label":
            if isinstance(value, list):
                labels = [_clean_label(item, source, where) for item in value]
                if DROP in labels:
                    dropped[0] += 1
                    return
                cleaned[role] = labels
            else:
                label = _clean_label(value, source, where)
                if label == DROP:
                    dropped[0] += 1
                    return
                cleaned[role] = label
        elif isinstance(value, list):
            cleaned[role] = [_clean_text(item, source, where) for item in value]
        else:
            cleaned[role] = _clean_text(value, source, where)
    for role, value in cleaned.items():
        columns.setdefault(role, []).append(value)


def _check_roles(roles: Sequence[str], where: str) -> None:
    unknown = sorted(set(roles) - set(ROLES))
    if unknown:
        raise InputError(f"{where}: unknown role(s) {unknown}; roles: {', '.join(ROLES)}")


def _file_list(files: FileList) -> list[str]:
    return [files] if isinstance(files, str) else list(files)


def _text_lines(names: FileList, base: Path, encoding: str, files: list[Path]) -> Iterator[tuple[Path, int, str]]:
    """``(path, line number, line)`` of each non-blank line of the files ``names`` (relative to ``base``), in order;
    each file's path is appended to ``files`` as it is opened."""
    for name in _file_list(names):
        path = resolve_file(name, base)
        files.append(path)
        for number, line in enumerate(read_lines(path, encoding), start=1):
            if line.strip():
                yield path, number, line


def _pick(spec: ColumnSpec, get: Any, where: str) -> Any:
    """A role's value from one row: ``get(column)`` of a column, the join of a :class:`Joined`, a list of either."""
    if isinstance(spec, list):
        return [_pick(item, get, where) for item in spec]
    if isinstance(spec, Joined):
        parts = [get(column) for column in spec.join]
        for column, part in zip(spec.join, parts):
            if not isinstance(part, str):
                raise DataFolderError(f"{where}: column {column!r} of a join is not text: {part!r:.60}")
        return spec.separator.join(part.strip() for part in parts if part.strip())
    return get(spec)


def _columns_of(spec: ColumnSpec) -> Iterator[Column]:
    """Every column a role's spec reads."""
    for item in spec if isinstance(spec, list) else [spec]:
        yield from item.join if isinstance(item, Joined) else [item]


def _delimited_rows(source: DelimitedSource, path: Path) -> list[tuple[int, dict[str, Any]]]:
    lines = read_lines(path, source.encoding)
    quoting = csv.QUOTE_NONE if source.quoting == "none" else csv.QUOTE_MINIMAL
    reader = csv.reader(io.StringIO("\n".join(lines)), delimiter=source.delimiter, quoting=quoting)
    rows = list(reader)
    header: list[str] = []
    if source.header:
        if not rows:
            raise DataFolderError(f"{path}: empty file, expected a header line")
        header, rows = rows[0], rows[1:]
        first_line = 2
    else:
        first_line = 1

    def index(column: Column) -> int:
        if isinstance(column, int):
            return column
        if column not in header:
            raise DataFolderError(f"{path}: no column {column!r} in the header ({', '.join(header)})")
        return header.index(column)

    indices = {column: index(column) for spec in source.columns.values() for column in _columns_of(spec)}
    width = max(indices.values()) + 1
    out = []
    for offset, fields in enumerate(rows):
        number = first_line + offset  # the record's number (a quoted csv field may span lines)
        if not fields or all(not item.strip() for item in fields):
            continue
        if len(fields) < width:
            raise DataFolderError(f"{path}, record {number}: {len(fields)} fields, expected at least {width}")
        where = f"{path}, record {number}"
        out.append((number, {role: _pick(spec, lambda column: fields[indices[column]], where)
                             for role, spec in source.columns.items()}))
    return out


def read_source(source: Source, base: Path) -> LabelledSplits:
    """Read every split of ``source`` (file names relative to ``base``)."""
    splits: dict[str, dict[str, list[Any]]] = {}
    files: list[Path] = []
    reader = _READERS.get(type(source))
    if reader is None:  # pragma: no cover -- the union is closed
        raise InputError(f"unknown source {type(source).__name__}")
    dropped = reader(source, base, files, lambda split: splits.setdefault(split, {}))
    for split, columns in splits.items():
        if not columns:
            raise DataFolderError(f"split {split!r} of the source holds no rows")
    return LabelledSplits(splits, files, dropped)


#: a source reader's arguments: the source, the folder its file names are relative to, the list it adds the files it
#: reads to, and the table of a split (made on first use); it returns the rows dropped per split
_Table = Callable[[str], dict[str, list[Any]]]


def _read_delimited(source: DelimitedSource, base: Path, files: list[Path], table: _Table) -> dict[str, int]:
    _check_roles(list(source.columns), "source columns")
    dropped = {}
    for split, names in source.splits.items():
        count = [0]
        for name in _file_list(names):
            path = resolve_file(name, base)
            files.append(path)
            for number, row in _delimited_rows(source, path):
                _add_row(table(split), row, source, f"{path}, record {number}", count)
        dropped[split] = count[0]
    return dropped


def _read_lines_per_label(source: LinesPerLabelSource, base: Path, files: list[Path], table: _Table
                          ) -> dict[str, int]:
    count = [0]
    for name, label in source.files.items():
        for path, number, line in _text_lines(name, base, source.encoding, files):
            _add_row(table(WHOLE_SET), {"text": line, "label": label}, source, f"{path}, line {number}", count)
    return {WHOLE_SET: count[0]}


def _read_aligned_lines(source: AlignedLinesSource, base: Path, files: list[Path], table: _Table) -> dict[str, int]:
    dropped = {}
    for split, by_role in source.splits.items():
        _check_roles(list(by_role), f"source split {split!r}")
        count = [0]
        columns: dict[str, list[str]] = {}
        for role, name in by_role.items():
            path = resolve_file(name, base)
            files.append(path)
            columns[role] = read_lines(path, source.encoding)
        sizes = {role: len(lines) for role, lines in columns.items()}
        if len(set(sizes.values())) != 1:
            raise DataFolderError(f"split {split!r}: aligned files have different line counts "
                                  f"({', '.join(f'{by_role[role]}: {n}' for role, n in sizes.items())})")
        for index in range(next(iter(sizes.values()))):
            row = {role: lines[index] for role, lines in columns.items()}
            where = f"split {split!r}, line {index + 1} of {', '.join(by_role.values())}"
            _add_row(table(split), row, source, where, count)
        dropped[split] = count[0]
    return dropped


def _read_regex_lines(source: RegexLinesSource, base: Path, files: list[Path], table: _Table) -> dict[str, int]:
    pattern = re.compile(source.pattern)
    dropped = {}
    for split, names in source.splits.items():
        count = [0]
        for path, number, line in _text_lines(names, base, source.encoding, files):
            match = pattern.fullmatch(line.strip())
            if match is None:
                raise DataFolderError(f"{path}, line {number}: does not match the source's pattern "
                                      f"{source.pattern!r}: {line.strip()!r:.80}")
            _add_row(table(split), match.groupdict(), source, f"{path}, line {number}", count)
        dropped[split] = count[0]
    return dropped


def _read_jsonl(source: JsonlSource, base: Path, files: list[Path], table: _Table) -> dict[str, int]:
    _check_roles(list(source.columns), "source columns")
    dropped = {}
    for split, names in source.splits.items():
        count = [0]
        for path, number, line in _text_lines(names, base, source.encoding, files):
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise DataFolderError(f"{path}, line {number}: not valid JSON ({error})") from None
            where = f"{path}, line {number}"
            if not isinstance(record, dict):
                raise DataFolderError(f"{where}: not a JSON object")
            missing = [key for spec in source.columns.values() for key in _columns_of(spec) if key not in record]
            if missing:
                raise DataFolderError(f"{where}: no key(s) {missing}")
            row = {role: _pick(spec, record.__getitem__, where) for role, spec in source.columns.items()}
            _add_row(table(split), row, source, where, count)
        dropped[split] = count[0]
    return dropped


#: the reader of each kind of source
_READERS: dict[type, Callable[..., dict[str, int]]] = {
    DelimitedSource: _read_delimited, LinesPerLabelSource: _read_lines_per_label,
    AlignedLinesSource: _read_aligned_lines, RegexLinesSource: _read_regex_lines, JsonlSource: _read_jsonl}


def attach_documents(splits: Mapping[str, dict[str, list[Any]]], documents: LabelledSplits
                     ) -> dict[str, dict[str, list[Any]]]:
    """Each split's query columns with the documents of the same split of a ranking task's ``documents`` source
    next to them: ``document`` (texts) and :data:`DOCUMENT_LABEL` (their labels). A split the documents lack is a
    one-line error.

    >>> docs = LabelledSplits({"test": {"document": ["d1", "d2"], "label": ["a", "b"]}})
    >>> attach_documents({"test": {"query": ["q"], "label": ["b"]}}, docs)["test"]
    {'query': ['q'], 'label': ['b'], 'document': ['d1', 'd2'], 'document_label': ['a', 'b']}
    """
    joined = {}
    for split, columns in splits.items():
        if split not in documents.splits:
            raise DataFolderError(f"split {split!r} has queries but the task's documents source has no split of that "
                                  f"name (it has {', '.join(sorted(documents.splits))}); name the same splits in both")
        found = documents.splits[split]
        joined[split] = {**columns, "document": found["document"], DOCUMENT_LABEL: found["label"]}
    return joined


def source_files(source: Source) -> list[str]:
    """Every file name ``source`` reads (relative names as written), in reading order.

    >>> source_files(parse_source({"format": "lines-per-label", "files": {"pos.txt": 1, "neg.txt": 0}}))
    ['pos.txt', 'neg.txt']
    """
    if isinstance(source, LinesPerLabelSource):
        return list(source.files)
    if isinstance(source, AlignedLinesSource):
        return [name for by_role in source.splits.values() for name in by_role.values()]
    return [name for names in source.splits.values() for name in _file_list(names)]


# ----------------------------------------------------------------------------- splitting one set
def _label_list(keys: Sequence[str]) -> str:
    shown = ", ".join(sorted(keys)[:6])
    return shown + (f" and {len(keys) - 6} more" if len(keys) > 6 else "")


def stratified_split(labels: Sequence[Any], *, test_fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """(train indices, test indices): a stratified, seeded split (scikit-learn's ``train_test_split``),
    each list in ascending order. Every label must end up on both sides: a label with fewer than 2 items, or one
    the split leaves without a train or a test item, is a one-line error naming it and the remedy.

    >>> train, test = stratified_split([0, 0, 0, 0, 1, 1, 1, 1, 1, 1], test_fraction=0.2, seed=1111)
    >>> len(train), len(test), sorted(set(range(10)) - set(train)) == test
    (8, 2, True)
    >>> stratified_split([0, 0, 0, 1], test_fraction=0.5, seed=1)
    Traceback (most recent call last):
    ...
    flow_plugin.errors.DataFolderError: the split rule needs at least 2 items of every label (one for train, one for test); label 1 has fewer: add items, or leave it out (map it to "drop" in the source's label_map)
    """
    from sklearn.model_selection import train_test_split  # heavy: scikit-learn takes seconds to import

    if not 0 < test_fraction < 1:
        raise InputError(f"test_fraction must be between 0 and 1, got {test_fraction}")
    keys = [json.dumps(label) for label in labels]  # hierarchical labels stratify by their tuple
    counts = Counter(keys)
    remedy = f"add items, or leave it out (map it to \"{DROP}\" in the source's label_map)"
    rare = [key for key, n in counts.items() if n < 2]
    if rare:
        raise DataFolderError(f"the split rule needs at least 2 items of every label (one for train, one for test); "
                              f"label {_label_list(rare)} has fewer: {remedy}")
    try:
        train, test = train_test_split(list(range(len(labels))), test_size=test_fraction, random_state=seed,
                                       stratify=keys)
    except ValueError as error:  # fewer test (or train) items than labels
        raise DataFolderError(f"the split rule (test_fraction {test_fraction}) cannot give each of the {len(counts)} "
                              f"labels a train and a test item ({error}); change test_fraction") from None
    for side, name in ((train, "train"), (test, "test")):
        absent = sorted(set(counts) - {keys[index] for index in side})
        if absent:
            raise DataFolderError(
                f"the split rule (test_fraction {test_fraction}, seed {seed}) leaves label {_label_list(absent)} "
                f"({counts[absent[0]]} items) without a {name} item; change test_fraction, {remedy}")
    return sorted(train), sorted(test)


# ----------------------------------------------------------------------------- what each type can score
def check_classes(train: Sequence[Any], scored: Sequence[Any], *, scored_split: str) -> None:
    """A classification set MTEB can score: at least 2 labels in ``train``, and every label of the scored split
    among them (a label the classifier never saw can never be predicted); else a one-line error with the remedy.

    >>> check_classes([0, 0, 1], [0, 2], scored_split="test")
    Traceback (most recent call last):
    ...
    flow_plugin.errors.DataFolderError: label 2 of split 'test' never occurs in split 'train': the classifier can never predict it; add train items of it, or leave it out (map it to "drop" in the source's label_map)
    """
    classes = {json.dumps(label) for label in train}
    if len(classes) < 2:
        raise DataFolderError(f"split 'train' holds one label ({_label_list(list(classes))}): a classifier needs at "
                              "least 2; add items of other labels")
    unseen = sorted({json.dumps(label) for label in scored} - classes)
    if unseen:
        raise DataFolderError(f"label {_label_list(unseen)} of split {scored_split!r} never occurs in split 'train': "
                              f"the classifier can never predict it; add train items of it, or leave it out (map it to "
                              f"\"{DROP}\" in the source's label_map)")


def check_clusters(levels: Sequence[Sequence[Any]], *, scored_split: str) -> None:
    """A clustering split MTEB can score: at least 2 labels at every level, and fewer labels than items (one cluster,
    or one cluster per item, scores a V-measure of 1 whatever the model); else a one-line error."""
    for number, labels in enumerate(levels):
        distinct = {json.dumps(label) for label in labels}
        level = f" at level {number}" if len(levels) > 1 else ""
        if len(distinct) < 2:
            raise DataFolderError(f"split {scored_split!r} holds one label{level} ({_label_list(list(distinct))}): one "
                                  "cluster scores 1.0 whatever the model; add items of other labels")
        if len(distinct) == len(labels):
            raise DataFolderError(f"split {scored_split!r} gives each of its {len(labels)} items a label of its "
                                  f"own{level}: every item is its own cluster, which scores 1.0 whatever the model; "
                                  "give several items each label")


def check_pairs(labels: Sequence[Any], *, split: str, scored: bool) -> None:
    """Pair labels are 0 or 1, and the scored split holds both (average precision over positives only is 1.0
    whatever the model); else a one-line error."""
    found = set(labels)
    if not found <= {0, 1}:
        raise DataFolderError(f"split {split!r}: pair labels must be 0 or 1 (map them with the source's label_map), "
                              f"found {sorted(map(str, found))[:6]}")
    if scored and len(found) < 2:
        raise DataFolderError(f"split {split!r} holds only pairs labelled {found.pop()}: average precision needs both "
                              "0 and 1; add pairs of the other label")


def select_rows(columns: Mapping[str, list[Any]], indices: Sequence[int]) -> dict[str, list[Any]]:
    """The rows ``indices`` of a split's columns."""
    return {role: [values[i] for i in indices] for role, values in columns.items()}


def files_fingerprint(files: Sequence[os.PathLike[str] | str], settings: Any) -> str:
    """``sha256:<hex>`` of the files' names and bytes (in the order read) and of ``settings`` (JSON):
    a task's data revision, which changes when a file or the way it is read changes."""
    digest = hashlib.sha256()
    for path in files:
        path = Path(path)
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    digest.update(json.dumps(settings, sort_keys=True, default=str).encode())
    return "sha256:" + digest.hexdigest()


__all__ = [
    "DOCUMENT_LABEL",
    "DROP",
    "FORMATS",
    "ROLES",
    "WHOLE_SET",
    "AlignedLinesSource",
    "ColumnSpec",
    "DelimitedSource",
    "Joined",
    "JsonlSource",
    "LabelledSplits",
    "LinesPerLabelSource",
    "RegexLinesSource",
    "Source",
    "attach_documents",
    "check_classes",
    "check_clusters",
    "check_pairs",
    "files_fingerprint",
    "parse_source",
    "read_lines",
    "read_source",
    "resolve_file",
    "select_rows",
    "source_files",
    "stratified_split",
]
