"""The API's JSON parser: DRF's, with the nesting of a body bounded before it is parsed.

Python's json module parses nesting by recursion: a body of a few thousand `[` raises a
RecursionError, which no handler expects (a 500). No labgov request has more than a few
levels, so a deeper body is refused as a parse error (400, problem+json) before parsing."""

import io

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

MAX_DEPTH = 32


def nesting_depth(text: str, limit: int = MAX_DEPTH) -> int:
    """How deep arrays and objects nest in `text` (strings skipped), stopping past `limit`."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    return deepest
        elif char in "]}":
            depth -= 1
    return deepest


class BoundedJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        raw = stream.read() if stream is not None else b""
        encoding = (parser_context or {}).get("encoding", "utf-8")
        try:
            text = raw.decode(encoding)
        except UnicodeDecodeError as exc:
            raise ParseError(f"The body is not {encoding} text.") from exc
        if nesting_depth(text) > MAX_DEPTH:
            raise ParseError(f"The body nests deeper than {MAX_DEPTH} levels.")
        return super().parse(io.BytesIO(raw), media_type, parser_context)
