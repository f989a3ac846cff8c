"""Griffe extension for the API reference: the code base titles doctest sections ``Example:``, which Google-style
parsing treats as an admonition; they are renamed ``Examples:`` so that the doctests render as code."""

from __future__ import annotations

import re
from typing import Any

import griffe

_EXAMPLE = re.compile(r"^(\s*)Example:\s*$", flags=re.MULTILINE)


class ExampleSections(griffe.Extension):
    """Renames ``Example:`` section titles to ``Examples:``."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _EXAMPLE.sub(r"\1Examples:", obj.docstring.value)
