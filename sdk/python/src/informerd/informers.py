"""PLACEHOLDER: the informer API (being written)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from informerd.client import Client


class Informers:
    def __init__(self, client: Client) -> None:
        self._client = client
