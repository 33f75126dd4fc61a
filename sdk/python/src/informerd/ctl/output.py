"""How informerctl prints: kubectl-style tables, JSON, YAML, names; ages and durations."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any, Generic, TypeVar

from google.protobuf import json_format
from google.protobuf.message import Message

#: ``-o`` values for lists of things; ``wide`` adds columns, ``name`` prints one name per line.
LIST_FORMATS = ("table", "wide", "json", "yaml", "name")

T = TypeVar("T")


@dataclass(frozen=True)
class Columns(Generic[T]):
    """How one kind of thing prints in every ``-o`` format."""

    #: The key of the list in JSON and YAML ({"informers": [...]}).
    kind: str
    headers: Sequence[str]
    row: Callable[[T], list[object]]
    name: Callable[[T], str]
    #: What ``-o json|yaml`` prints of one item.
    as_dict: Callable[[T], Any]
    wide_headers: Sequence[str] = ()
    wide_row: Callable[[T], list[object]] | None = None

    def cells(self, item: T, wide: bool) -> list[object]:
        """One table row, with the wide columns when ``wide``."""
        row = self.row(item)
        if wide and self.wide_row is not None:
            row += self.wide_row(item)
        return row


def print_list(columns: Columns[T], items: Sequence[T], fmt: str, out: IO[str]) -> None:
    """``items`` in format ``fmt`` (one of LIST_FORMATS)."""
    if fmt in ("json", "yaml"):
        dump({columns.kind: [columns.as_dict(i) for i in items]}, fmt, out)
    elif fmt == "name":
        for i in items:
            out.write(columns.name(i) + "\n")
    else:
        wide = fmt == "wide" and columns.wide_row is not None
        headers = [*columns.headers, *(columns.wide_headers if wide else ())]
        table(headers, [columns.cells(i, wide) for i in items], out)


def table(headers: Sequence[str], rows: Iterable[Sequence[object]], out: IO[str]) -> None:
    """Columns as ``kubectl get`` prints them: upper-case headers, left-aligned, three spaces
    apart, no trailing blanks; "<none>" for empty cells."""
    cells = [[str(h) for h in headers]]
    for row in rows:
        cells.append([cell(v) for v in row])
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for r in cells:
        line = "   ".join(v.ljust(w) for v, w in zip(r, widths, strict=True))
        out.write(line.rstrip() + "\n")


def cell(value: object) -> str:
    """One table cell's text."""
    if value is None or value == "":
        return "<none>"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def to_dict(message: Message) -> dict[str, Any]:
    """A message as the proto's JSON mapping (lowerCamelCase names, as grpcurl prints it), with
    zero values printed too, so that scripts find every field."""
    return json_format.MessageToDict(message, always_print_fields_with_no_presence=True)


def dump(value: Any, fmt: str, out: IO[str]) -> None:
    """``value`` (JSON-shaped: dicts, lists, strings, numbers) as ``json`` or ``yaml``."""
    if fmt == "json":
        out.write(json.dumps(value, indent=2, sort_keys=False) + "\n")
        return
    if fmt == "yaml":
        import yaml

        out.write(yaml.safe_dump(value, sort_keys=False, default_flow_style=False))
        return
    raise ValueError(f"-o {fmt}: not json or yaml")


def age(unix_ms: int, now: float | None = None) -> str:
    """How long ago ``unix_ms`` was, as kubectl prints ages ("45s", "3m12s", "5h", "12d"); "" for
    0 (never)."""
    if unix_ms <= 0:
        return ""
    seconds = max(0.0, (now if now is not None else time.time()) - unix_ms / 1000)
    return duration_text(seconds)


def duration_text(seconds: float) -> str:
    s = int(seconds)
    if s < 120:
        return f"{s}s"
    if s < 600:
        return f"{s // 60}m{s % 60}s" if s % 60 else f"{s // 60}m"
    if s < 3 * 3600:
        return f"{s // 60}m"
    if s < 8 * 3600:
        return f"{s // 3600}h{(s % 3600) // 60}m" if (s % 3600) // 60 else f"{s // 3600}h"
    if s < 2 * 86400:
        return f"{s // 3600}h"
    return f"{s // 86400}d"


_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str, flag: str) -> float:
    """Seconds from "500ms", "5s", "2m", "1h" or a bare number of seconds; ValueError naming
    ``flag`` otherwise."""
    value = text.strip()
    for unit in sorted(_UNITS, key=len, reverse=True):
        if value.endswith(unit):
            number, scale = value[: -len(unit)], _UNITS[unit]
            break
    else:
        number, scale = value, 1.0
    try:
        seconds = float(number) * scale
    except ValueError:
        raise ValueError(f"{flag}: {text!r} is not a duration (e.g. 500ms, 5s, 2m, 1h)") from None
    if not seconds >= 0 or seconds == float("inf"):
        raise ValueError(f"{flag}: {text!r} must be a finite duration of 0 or more")
    return seconds


def size_text(n: int) -> str:
    """Bytes as kubectl prints quantities: 1536 -> "1.5Ki"."""
    value = float(n)
    for unit in ("", "Ki", "Mi", "Gi", "Ti"):
        if value < 1024 or unit == "Ti":
            return f"{value:.0f}{unit}" if unit == "" or value >= 10 else f"{value:.1f}{unit}"
        value /= 1024
    return str(n)


def selectors(fields: Mapping[str, str]) -> str:
    """The non-empty selectors as "label=app=web,field=..."."""
    return ",".join(f"{k}={v}" for k, v in fields.items() if v)
