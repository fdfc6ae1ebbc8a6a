"""The API's JSON parser: the standard one, behind a nesting limit.

`json.loads` recurses once per level of nesting, so a body of 2,000 "[" (or 100,000 nested
objects) raised RecursionError, a 500. The depth is measured first by a flat scan of the text,
which cannot recurse, and a body nested deeper than any API payload is refused as a 400."""

import codecs
import re

from django.utils.translation import gettext as _
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser, get_encoding
from rest_framework.utils import json  # DRF's: strict_constant, as its JSONParser uses

MAX_JSON_DEPTH = 64

# A whole string (its escapes included, so an escaped quote does not end it) or one bracket.
_STRING_OR_BRACKET = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)


def json_depth_exceeds(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether the arrays and objects of JSON `text` nest more than `limit` deep; brackets
    inside strings do not count."""
    depth = 0
    for token in _STRING_OR_BRACKET.finditer(text):
        char = token.group()[0]
        if char in "[{":
            depth += 1
            if depth > limit:
                return True
        elif char in "]}":
            depth -= 1
    return False


class DepthLimitedJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        encoding = get_encoding(parser_context or {})
        try:
            text = codecs.getreader(encoding)(stream).read()
        except ValueError as exc:  # UnicodeDecodeError
            raise ParseError(f"JSON parse error - {exc}") from exc
        if json_depth_exceeds(text):
            raise ParseError(
                _("The JSON body is nested more than %(limit)d levels deep.")
                % {"limit": MAX_JSON_DEPTH}
            )
        try:
            parse_constant = json.strict_constant if self.strict else None
            return json.loads(text, parse_constant=parse_constant)
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from exc
