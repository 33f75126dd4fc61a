"""Kubernetes label selectors, matched locally (for :class:`informerd.Store`; the daemon applies
selectors itself in List calls and informer specs).

    matches = label_matcher("app=web,tier in (front,edge),!canary")
    matches({"app": "web", "tier": "front"})   # True

The syntax is apimachinery's: requirements separated by commas, each ``key=value``,
``key==value``, ``key!=value``, ``key in (v1,v2)``, ``key notin (v1,v2)``, ``key`` (exists) or
``!key`` (does not exist). ``!=`` and ``notin`` match objects without the key, as in Kubernetes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from informerd.errors import InvalidArgument, invalid_field

LabelMatcher = Callable[[Mapping[str, str]], bool]

_KEY = r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?"
_VALUE = r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_EQUALITY = re.compile(rf"^\s*(?P<key>{_KEY})\s*(?P<op>==|!=|=)\s*(?P<value>{_VALUE})\s*$")
_SET = re.compile(rf"^\s*(?P<key>{_KEY})\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)\s*$")
_EXISTS = re.compile(rf"^\s*(?P<neg>!?)\s*(?P<key>{_KEY})\s*$")
_VALUE_ONLY = re.compile(rf"^{_VALUE}$")


def _requirements(selector: str) -> list[str]:
    """Splits at the commas outside parentheses."""
    parts: list[str] = []
    depth = 0
    current = ""
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    return parts


def _requirement(text: str, field: str) -> LabelMatcher:
    if m := _EQUALITY.match(text):
        key, value = m["key"], m["value"]
        if m["op"] == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    if m := _SET.match(text):
        key = m["key"]
        values = frozenset(v.strip() for v in m["values"].split(","))
        if not all(_VALUE_ONLY.match(v) for v in values):
            raise _bad(field, text, "a value in the list is not a label value")
        if m["op"] == "notin":
            return lambda labels: labels.get(key) not in values
        return lambda labels: labels.get(key) in values
    if m := _EXISTS.match(text):
        key = m["key"]
        if m["neg"]:
            return lambda labels: key not in labels
        return lambda labels: key in labels
    raise _bad(field, text, "not a requirement (key=value, key!=value, key in (..), key, !key)")


def _bad(field: str, text: str, why: str) -> InvalidArgument:
    return invalid_field(field, f"{text.strip()!r}: {why}")


def label_matcher(selector: str, *, field: str = "label_selector") -> LabelMatcher:
    """A function telling whether labels match ``selector`` ("" matches everything); raises
    :class:`informerd.InvalidArgument` naming ``field`` for a selector that does not parse."""
    if not selector.strip():
        return lambda labels: True
    requirements = [_requirement(part, field) for part in _requirements(selector)]
    return lambda labels: all(r(labels) for r in requirements)
