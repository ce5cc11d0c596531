"""A text window over a JSON file, for streaming the elements of a top-level array.

`JsonWindow.decode` hands the C decoder a window that grows until the element at hand decodes;
`skip_value` moves past an element that cannot be decoded (nested too deep, a number too long,
too large), tracking only strings and brackets, in flat memory.
"""

from __future__ import annotations

import io
import json
import re
from typing import Any

__all__ = ["JsonWindow", "TooLarge"]


class TooLarge(ValueError):
    """An element longer than the window's `max_chars` (or malformed past that point)."""


# What the scanner stops at: outside strings, quotes and brackets; inside, quotes and escapes;
# after a bare number or literal, its end.
_STRUCTURE = re.compile(r'["\[\]{}]')
_IN_STRING = re.compile(r'["\\]')
_SCALAR_END = re.compile(r"[,\]}\s]")
# What is left of a number the window cut after its "." or its exponent's "e", "e+", "e-": the
# decoder stops before it, so the value looks whole one or two characters short of the window.
_NUMBER_CUT = re.compile(r"\.|[eE][-+]?")


class JsonWindow:
    """A text window over a file for `JSONDecoder.raw_decode`, refilled as elements need.

    Args:
        f: the file, opened as text.
        block: characters read at a time.
        max_chars: the longest element `decode` grows the window for.
    """

    def __init__(self, f: io.TextIOBase, block: int, max_chars: int) -> None:
        self.f = f
        self.block = block
        self.max_chars = max_chars
        self.text = ""
        self.pos = 0
        self.eof = False
        self.size = 0
        """Characters of the element `decode` returned last."""

    def _fill(self, size: int) -> bool:
        if self.eof:
            return False
        block = self.f.read(size)
        if not block:
            self.eof = True
            return False
        self.text = self.text[self.pos :] + block
        self.pos = 0
        return True

    def skip_space(self) -> bool:
        """Move past whitespace; False at the end of the file."""
        while True:
            while self.pos < len(self.text) and self.text[self.pos] in " \t\r\n":
                self.pos += 1
            if self.pos < len(self.text):
                return True
            if not self._fill(self.block):
                return False

    def peek(self) -> str:
        """The character at `pos`."""
        return self.text[self.pos]

    def decode(self, decoder: json.JSONDecoder) -> Any:
        """The value at `pos`, growing the window until it decodes; `pos` moves past it.

        Raises:
            json.JSONDecodeError: the value is malformed (the file ends before it is whole).
            TooLarge: the window outgrew `max_chars` and the value still does not decode.
            RecursionError, ValueError: valid JSON that Python cannot decode (too deep, a
                number too long); `pos` stays at the value's start, for `skip_value`.
        """
        size = self.block
        while True:
            try:
                value, end = decoder.raw_decode(self.text, self.pos)
            except json.JSONDecodeError:
                # Maybe only cut by the window: read more and try again, up to the cap.
                if len(self.text) - self.pos > self.max_chars:
                    raise TooLarge(
                        f"longer than {self.max_chars:,} characters, or malformed past that"
                    ) from None
                if not self._fill(size):
                    raise
                size *= 2
                continue
            cut = end == len(self.text) or _NUMBER_CUT.fullmatch(self.text, end)
            if cut and not self.eof and self._fill(size):
                continue  # a number or literal may go on past the window ("1." of "1.5")
            self.size = end - self.pos
            self.pos = end
            return value

    def skip_value(self) -> bool:
        """Move past the JSON value at `pos` without decoding it, in flat memory.

        Only strings and brackets are tracked, so a valid value is skipped exactly, whatever
        its depth or size. False when the file ends inside the value.
        """
        if self.text[self.pos] not in '"[{':
            while not (end := _SCALAR_END.search(self.text, self.pos)):
                self.pos = len(self.text)
                if not self._fill(self.block):
                    return True
            self.pos = end.start()
            return True
        depth = 0
        in_string = False
        while True:
            found = (_IN_STRING if in_string else _STRUCTURE).search(self.text, self.pos)
            if found is None or (found.group() == "\\" and found.end() == len(self.text)):
                # Keep an escape's backslash with the character it escapes, in the next window.
                self.pos = len(self.text) if found is None else found.start()
                if not self._fill(self.block):
                    return False
                continue
            char = found.group()
            self.pos = found.end()
            if in_string:
                if char == "\\":
                    self.pos += 1
                    continue
                in_string = False
            elif char == '"':
                in_string = True
                continue
            elif char in "[{":
                depth += 1
                continue
            else:
                depth -= 1
            if depth <= 0:
                return True
