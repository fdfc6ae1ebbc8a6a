"""What an organization's business licence upload may be: a PDF, PNG or JPEG file and nothing a
browser or a PDF reader could run. Licences are opened by operators, so the check is strict."""

import base64
import binascii
import re
import zlib
from itertools import zip_longest

from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

_MAGIC = {
    ".pdf": b"%PDF",
    ".png": b"\x89PNG",
    ".jpg": b"\xff\xd8\xff",
    ".jpeg": b"\xff\xd8\xff",
}

# Everything a PDF's streams may decode to, all together: a licence is a page or two, while a
# compression bomb (a few KB inflating to GBs) is refused once past it, before memory runs out.
MAX_DECODED_PDF_BYTES = 20 * 1024 * 1024


def validate_licence(upload) -> None:
    suffix = "." + upload.name.rsplit(".", 1)[-1].lower() if "." in upload.name else ""
    if suffix not in _MAGIC:
        raise ValidationError(
            _("Upload the licence as a PDF, PNG or JPEG file."), code="licence_type"
        )
    if upload.size > settings.LOAM_LICENCE_MAX_BYTES:
        raise ValidationError(
            _("The licence file is %(size)s MB; the limit is %(limit)s MB.")
            % {
                "size": round(upload.size / 1024 / 1024, 1),
                "limit": settings.LOAM_LICENCE_MAX_BYTES // 1024 // 1024,
            },
            code="licence_size",
        )
    content = upload.read()
    upload.seek(0)
    kind = suffix[1:].upper()
    if not content.startswith(_MAGIC[suffix]):
        raise ValidationError(
            _("The file's content is not a %(kind)s file.") % {"kind": kind},
            code="licence_content",
        )
    # The whole file, not only its first bytes: a PDF or image that is also an HTML page (a
    # polyglot) or carries script is refused, so nothing a browser could run is ever stored.
    if not _WHOLE_FILE_CHECKS[suffix](content) or _MARKUP.search(content):
        raise _not_plain(kind)
    if suffix == ".pdf":
        _refuse_active_pdf_content(content)


def _not_plain(kind: str) -> ValidationError:
    return ValidationError(
        _(
            "The file is not a plain %(kind)s file (it is damaged or holds other content, "
            "such as a web page or script). Export or scan the licence again."
        )
        % {"kind": kind},
        code="licence_content",
    )


# Markup or script a browser could run: HTML and SVG elements, event handlers (onload=, ...)
# and script URLs. Each needs several exact bytes, so compressed or image data rarely matches.
_MARKUP = re.compile(
    rb"<(?:!doctype|html|head|body|script|iframe|object|embed|meta|form|svg|math)[\s/>]"
    rb"|<[a-z][a-z0-9:-]*\s[^<>]{0,256}?\bon[a-z]{4,}\s*="
    rb"|(?:java|vb)script:",
    re.IGNORECASE,
)

# PDF names that make a reader run something, open something or send something: script
# (JavaScript, JS), programs (Launch), attached files (EmbeddedFile(s)), Flash and media
# (RichMedia), XML forms (XFA), form actions that post or load data (SubmitForm, ImportData)
# and go-to actions into other files (GoToR, GoToE), which may lie on a network share (a
# Windows reader then hands the operator's credentials to that server). /OpenAction and /AA
# (actions on opening or on events) are not listed: they only trigger an action, and a
# dangerous one names one of these. /URI is not listed either: a link does nothing until the
# reader clicks it, and readers ask before leaving the document.
_ACTIVE_NAMES = {
    b"JavaScript",
    b"JS",
    b"Launch",
    b"EmbeddedFile",
    b"EmbeddedFiles",
    b"RichMedia",
    b"XFA",
    b"SubmitForm",
    b"ImportData",
    b"GoToR",
    b"GoToE",
}

_REGULAR = rb"[^\x00\t\n\x0c\r ()<>\[\]{}/%]"
_HEX_ESCAPE = re.compile(rb"#([0-9A-Fa-f]{2})")
_SPACE = rb"[\x00\t\n\x0c\r ]"
_HEX_STRING = rb"<[0-9A-Fa-f\x00\t\n\x0c\r ]*>"
# The end-of-file marker ends where it ends: some writers append an update right after it
# ("%%EOF1 0 obj"), and readers, going by offsets, read that object.
_COMMENT = rb"%%EOF|%[^\r\n]*"
# The object syntax between streams, as far as where streams start depends on it: runs of
# numbers, spaces, names, other words (all but the keywords stream and obj), hex strings and
# plain literal strings are taken whole, then each bracket, nesting string and keyword.
# Anything else (a stray ")" or ">", a "<" that starts no string) is damage a reader would
# guess around. Possessive quantifiers (++, *+) never backtrack, so no input makes it slow.
_STRUCTURE = re.compile(
    rb"(?P<filler>(?:[0-9.+-]++|" + _SPACE + rb"++|/" + _REGULAR + rb"*+"
    rb"|(?!(?:stream|obj)(?!" + _REGULAR + rb"))" + _REGULAR + rb"++"
    rb"|" + _HEX_STRING + rb"|[{}]|\((?:[^()\\]++|\\[\x00-\xff])*+\))++)"
    rb"|(?P<comment>" + _COMMENT + rb")|(?P<open><<|\[)|(?P<close>>>|\])|(?P<string>\()"
    rb"|(?P<keyword>stream|obj)"
)
_SPACES_ONLY = re.compile(rb"(?:" + _SPACE + rb"+|" + _COMMENT + rb")*")
_CLOSING = {b"<<": b">>", b"[": b"]"}
# A stream's dictionary, token by token, to read its entries.
_TOKEN = re.compile(
    rb"(?P<space>" + _SPACE + rb"+|" + _COMMENT + rb")"
    rb"|(?P<open_dict><<)|(?P<close_dict>>>)|(?P<open_array>\[)|(?P<close_array>\])"
    rb"|(?P<hex_string>" + _HEX_STRING + rb")|(?P<string>\()"
    rb"|/(?P<name>" + _REGULAR + rb"*)"
    rb"|(?P<word>" + _REGULAR + rb"+|[{}])"
)
_STRING_PART = re.compile(rb"\\.|[()]", re.DOTALL)
# After the stream keyword, its data starts on the next line (readers allow spaces first).
_STREAM_START = re.compile(rb"[ \t]*(?:\r\n|\n|\r)")
# "12 0 obj" wherever it stands: a reader rebuilding a damaged file's index finds objects by
# this, even inside a comment, a string or another stream's data.
_OBJECT_HEADER = re.compile(rb"(?<![0-9])[0-9]++" + _SPACE + rb"++[0-9]++" + _SPACE + rb"*+obj")

_INFLATE = {b"FlateDecode", b"Fl"}
_ASCII_HEX = {b"ASCIIHexDecode", b"AHx"}
_ASCII_85 = {b"ASCII85Decode", b"A85"}
# Image codecs: what they hold is pixels, which no reader takes for objects or script.
_IMAGE_CODECS = {b"DCTDecode", b"DCT", b"JPXDecode", b"CCITTFaxDecode", b"CCF", b"JBIG2Decode"}
# Streams of pixels, font programs and cross-reference tables: binary data that no reader
# parses as objects (an object stream needs /First, so one posing as these is still decoded).
_BINARY_TYPES = {b"XRef"}
_BINARY_SUBTYPES = {b"Image", b"Type1C", b"CIDFontType0C", b"OpenType"}
_FONT_PROGRAM_KEYS = {b"Length1", b"Length2", b"Length3"}
# Undoing a predictor runs byte by byte in Python, so it gets a smaller cap than inflating.
# Predictors serve images and cross-reference tables, which are skipped; elsewhere they are rare.
_MAX_PREDICTED_BYTES = 1024 * 1024
_MAX_TOKENS = 500_000  # see _Syntax


class _Unreadable(Exception):
    """Something that cannot be decoded or parsed the way every reader would, so cannot be
    judged."""


class _TooLarge(Exception):
    """The decoded streams passed MAX_DECODED_PDF_BYTES."""


def _unescape(data: bytes) -> bytes:
    return _HEX_ESCAPE.sub(lambda escape: bytes.fromhex(escape.group(1).decode()), data)


def _name_pattern(names: set[bytes]) -> re.Pattern:
    """Finds any of `names` as a whole PDF name: a slash and regular characters, any of them
    perhaps written #xx (/Java#53cript). One regular expression, so a file of a million
    names is searched as fast as one."""

    def spelled(byte: int) -> bytes:
        hex_digits = b"".join(
            b"[%c%c]" % (digit, digit ^ 0x20) if digit > ord("9") else bytes([digit])
            for digit in b"%02x" % byte  # #4a and #4A alike
        )
        return b"(?:%s|#%s)" % (re.escape(bytes([byte])), hex_digits)

    alternatives = b"|".join(b"".join(map(spelled, name)) for name in sorted(names))
    return re.compile(rb"/(?:" + alternatives + rb")(?!" + _REGULAR + rb")")


def _is_active(data: bytes, *, markup: bool) -> bool:
    return bool(_ACTIVE_NAME.search(data) or (markup and _MARKUP.search(data)))


_ACTIVE_NAME = _name_pattern(_ACTIVE_NAMES)
_ENCRYPT_NAME = _name_pattern({b"Encrypt"})


def _refuse_active_pdf_content(content: bytes) -> None:
    """Judges the PDF's objects as a reader sees them: names with their #xx escapes decoded,
    and streams (object streams, /ObjStm, among them) decoded."""
    try:
        objects, streams = _split_streams(content)
        decoded = _decode_streams(streams)
    except _Unreadable:
        raise ValidationError(
            _(
                "The PDF is encrypted, damaged or compressed in a way that cannot be checked. "
                "Print or export it to a new PDF and upload that."
            ),
            code="licence_content",
        ) from None
    except _TooLarge:
        raise ValidationError(
            _("The PDF expands to more than %(limit)s MB when opened; upload a smaller file.")
            % {"limit": MAX_DECODED_PDF_BYTES // 1024 // 1024},
            code="licence_content",
        ) from None
    if _ENCRYPT_NAME.search(objects):
        # Encrypted streams and strings cannot be read, so nothing in them can be judged.
        raise ValidationError(
            _("The PDF is password-protected or encrypted. Upload an unprotected copy."),
            code="licence_content",
        )
    # The file's own bytes were searched for markup already. Names are searched in all the
    # object syntax, strings and comments included: more than a reader acts on, never less.
    if _is_active(objects, markup=False) or any(_is_active(d, markup=True) for d in decoded):
        raise ValidationError(
            _(
                "The PDF holds scripts, attachments, forms that send data or other "
                "active content. Print or export the licence to a plain PDF and upload "
                "that."
            ),
            code="licence_content",
        )


# A parsed value: ("name", b"Filter"), ("word", b"12"), ("reference", b""), ("string", b""),
# ("hex_string", b"<...>"), or ("dict", b"inner text") and ("array", b"inner text").
Value = tuple[str, bytes]
# A stream to judge: its filters, each with its parameters (None for a binary stream, which is
# not judged), and its data.
Stream = tuple[list[tuple[bytes, dict[bytes, Value]]] | None, bytes]


class _Syntax:
    """Reads tokens for the parse below, at most _MAX_TOKENS of them: Python steps through
    brackets, nesting strings and keywords one at a time, so a crafted file of millions would
    hold a worker for many seconds. The largest real PDFs tried needed about 100,000."""

    def __init__(self) -> None:
        self.tokens_left = _MAX_TOKENS

    def spend(self) -> None:
        self.tokens_left -= 1
        if self.tokens_left < 0:
            raise _Unreadable

    def match(self, pattern: re.Pattern, text: bytes, position: int, end: int) -> re.Match:
        self.spend()
        token = pattern.match(text, position, end)
        if not token:
            raise _Unreadable
        return token


def _split_streams(content: bytes) -> tuple[bytes, list[Stream]]:
    """The file's object syntax with stream data cut out, and each stream. Stream data is
    judged only once decoded: raw, compressed bytes would match names by chance.

    Where each stream starts and ends, and which filters it names, decide what is judged, so
    they are read as a reader reads them: token by token, from the dictionary's own top-level
    entries (not a /Length or /Filter nested inside another value or a string). What readers
    would each guess differently at is refused as damage: a stream keyword anywhere but after
    an object's dictionary, unbalanced brackets, a key given twice, and an object header where
    no object starts (a reader rebuilding the file's index would find it there)."""
    syntax, outside, streams = _Syntax(), [], []
    open_brackets: list[bytes] = []
    dictionary_start = dictionary_end = None  # the last dictionary outside any other value
    object_starts = set()
    chunk_start = position = 0
    # Bytes after the last end-of-file marker are no part of the document; a reader ignores
    # them, so they need not parse (they are still searched for names and object headers).
    end_of_syntax = content.rfind(b"%%EOF") + len(b"%%EOF") if b"%%EOF" in content else len(content)
    while position < end_of_syntax:
        token = syntax.match(_STRUCTURE, content, position, end_of_syntax)
        kind, position = token.lastgroup, token.end()
        if kind == "open":
            if not open_brackets:
                dictionary_start = token.start() if token.group() == b"<<" else None
            open_brackets.append(_CLOSING[token.group()])
        elif kind == "close":
            if not open_brackets or open_brackets.pop() != token.group():
                raise _Unreadable
            dictionary_end = position
        elif kind == "string":
            position = _string_end(syntax, content, position)
        elif kind == "keyword" and token.group() == b"obj":
            if not open_brackets:
                object_starts.add(token.start())
        elif kind == "keyword":  # stream
            if (
                open_brackets
                or dictionary_start is None
                or not _SPACES_ONLY.fullmatch(content, dictionary_end, token.start())
            ):
                raise _Unreadable
            dictionary = _dictionary(syntax, content[dictionary_start:dictionary_end])
            start = _STREAM_START.match(content, position)
            if not start:
                raise _Unreadable
            end = _stream_end(content, dictionary, start.end())
            outside.append(content[chunk_start : start.end()])
            filters = None if _is_binary(dictionary) else _filters(syntax, dictionary)
            streams.append((filters, content[start.end() : end]))
            chunk_start = position = end
            dictionary_start = None
    if open_brackets:
        raise _Unreadable
    for header in _OBJECT_HEADER.finditer(content):
        if header.end() - len(b"obj") not in object_starts:
            raise _Unreadable
    outside.append(content[chunk_start:])
    return b"".join(outside), streams


def _dictionary(syntax: _Syntax, text: bytes) -> dict[bytes, Value]:
    """The entries of the dictionary `text` holds."""
    values = _values(syntax, text)
    if len(values) != 1 or values[0][0] != "dict":
        raise _Unreadable
    return _entries(_values(syntax, values[0][1]))


def _values(syntax: _Syntax, text: bytes) -> list[Value]:
    """The values `text` holds, in order. A dictionary or array inside is (kind, its inner
    text), read only when needed: most never are, and they may be long."""
    values, position = [], 0
    while position < len(text):
        token = syntax.match(_TOKEN, text, position, len(text))
        position, kind = token.end(), token.lastgroup
        if kind in ("open_dict", "open_array"):
            closing = _CLOSING[token.group()]
            end = _value_end(syntax, text, position, closing)
            values.append((kind.removeprefix("open_"), text[position : end - len(closing)]))
            position = end
        elif kind in ("close_dict", "close_array"):
            raise _Unreadable
        elif kind == "string":
            position = _string_end(syntax, text, position)
            values.append((kind, b""))
        elif kind == "name":
            values.append((kind, _unescape(token.group("name"))))
        elif kind != "space":
            values.append((kind, token.group(kind)))
    return values


def _value_end(syntax: _Syntax, text: bytes, position: int, closing: bytes) -> int:
    """Where the dictionary or array opened just before `position` ends, past `closing`."""
    open_brackets = [closing]
    while open_brackets:
        token = syntax.match(_STRUCTURE, text, position, len(text))
        kind, position = token.lastgroup, token.end()
        if kind == "open":
            open_brackets.append(_CLOSING[token.group()])
        elif kind == "close" and open_brackets.pop() != token.group():
            raise _Unreadable
        elif kind == "string":
            position = _string_end(syntax, text, position)
    return position


def _string_end(syntax: _Syntax, text: bytes, position: int) -> int:
    """Where the literal string opened just before `position` ends: parentheses nest, and a
    backslash escapes the next byte."""
    depth = 1
    for part in _STRING_PART.finditer(text, position):
        syntax.spend()
        if part.group() == b"(":
            depth += 1
        elif part.group() == b")":
            depth -= 1
            if not depth:
                return part.end()
    raise _Unreadable


def _entries(values: list[Value]) -> dict[bytes, Value]:
    """A dictionary's keys and values; an indirect reference ("7 0 R") is ("reference", b"")."""
    entries, position = {}, 0
    while position < len(values):
        key = values[position]
        if key[0] != "name" or key[1] in entries or position + 1 == len(values):
            raise _Unreadable  # a key given twice: readers differ on which copy counts
        if _is_reference(values[position + 1 : position + 4]):
            entries[key[1]], position = ("reference", b""), position + 4
        else:
            entries[key[1]], position = values[position + 1], position + 2
    return entries


def _is_reference(values: list[Value]) -> bool:
    if len(values) < 3:
        return False
    (number_kind, number), (generation_kind, generation), keyword = values
    return (
        number_kind == generation_kind == "word"
        and number.isdigit()
        and generation.isdigit()
        and keyword == ("word", b"R")
    )


def _stream_end(content: bytes, dictionary: dict[bytes, Value], start: int) -> int:
    """Where the stream's data ends: its /Length when written out and followed by endstream
    (as a reader reads it), else the next endstream."""
    kind, length = dictionary.get(b"Length", ("", b""))
    if kind == "word" and _is_small_number(length):
        end = start + int(length)
        if content[end : end + 32].lstrip().startswith(b"endstream"):
            return end
    end = content.find(b"endstream", start)
    if end < 0:
        raise _Unreadable
    return end


def _is_binary(dictionary: dict[bytes, Value]) -> bool:
    """Pixels, a font program or a cross-reference table (see _BINARY_TYPES)."""
    return b"First" not in dictionary and bool(
        _name(dictionary, b"Type") in _BINARY_TYPES
        or _name(dictionary, b"Subtype") in _BINARY_SUBTYPES
        or dictionary.keys() & _FONT_PROGRAM_KEYS
    )


def _name(dictionary: dict[bytes, Value], key: bytes) -> bytes | None:
    kind, value = dictionary.get(key, ("", b""))
    return value if kind == "name" else None


def _filters(syntax: _Syntax, dictionary: dict[bytes, Value]) -> list[tuple[bytes, dict]]:
    """The stream's filters in order, each with its /DecodeParms entries."""
    null = ("word", b"null")
    filters, parameters = dictionary.get(b"Filter"), dictionary.get(b"DecodeParms", null)
    if filters is None:
        return []
    # One filter, or one set of parameters, may stand alone; null means no parameters.
    if filters[0] not in ("name", "array"):
        raise _Unreadable  # e.g. an indirect /Filter 7 0 R, which names nothing here
    names = [filters] if filters[0] == "name" else _values(syntax, filters[1])
    given = [parameters] if parameters[0] != "array" else _values(syntax, parameters[1])
    if not names:
        return []
    if len(given) > len(names):
        raise _Unreadable
    chain = []
    for (kind, name), each in zip_longest(names, given, fillvalue=null):
        if kind != "name" or (each[0] != "dict" and each != null):
            raise _Unreadable  # an indirect /DecodeParms names nothing here either
        parsed = _dictionary(syntax, b"<<%s>>" % each[1]) if each[0] == "dict" else {}
        chain.append((name, parsed))
    return chain


def _decode_streams(streams: list[Stream]) -> list[bytes]:
    """Each stream's data, decoded, except binary streams."""
    decoded, budget, predicted_budget = [], MAX_DECODED_PDF_BYTES, _MAX_PREDICTED_BYTES
    for filters, data in streams:
        if filters is None:
            continue
        for name, parameters in filters:
            if name in _IMAGE_CODECS:
                break
            if name in _INFLATE:
                data = _inflate(data, budget)
                if _predictor(parameters) != 1:
                    predicted_budget -= len(data)
                    if predicted_budget < 0:
                        raise _Unreadable
                    data = _unpredict(data, parameters)
            elif name in _ASCII_HEX:
                data = _unhex(data)
            elif name in _ASCII_85:
                data = _un85(data)
            else:
                raise _Unreadable  # LZW, run-length, Crypt: rare, and a place to hide
            budget -= len(data)
            if budget < 0:
                raise _TooLarge
        decoded.append(data)
    return decoded


def _inflate(data: bytes, budget: int) -> bytes:
    """zlib-inflates at most `budget` bytes: a bomb stops there, having used that much."""
    inflater = zlib.decompressobj()
    try:
        inflated = inflater.decompress(data, budget + 1)
    except zlib.error:
        raise _Unreadable from None
    if len(inflated) > budget:
        raise _TooLarge
    if not inflater.eof:
        raise _Unreadable  # cut short: a reader would see more than this
    return inflated


def _integer(parameters: dict[bytes, Value], key: bytes, default: int) -> int:
    kind, value = parameters.get(key, ("word", str(default).encode()))
    if kind != "word" or not _is_small_number(value):
        raise _Unreadable
    return int(value)


def _is_small_number(word: bytes) -> bool:
    """A whole number below a billion: any count or size in a 10 MB file (and int() refuses
    thousands of digits with ValueError)."""
    return word.isdigit() and len(word) <= 9


def _predictor(parameters: dict[bytes, Value]) -> int:
    return _integer(parameters, b"Predictor", 1)


def _unpredict(data: bytes, parameters: dict[bytes, Value]) -> bytes:
    """Undoes a TIFF or PNG predictor, as a reader does after inflating: each byte stored as
    its difference from a neighbour, which would hide names from a search of the inflated
    bytes."""
    predictor = _predictor(parameters)
    colors = _integer(parameters, b"Colors", 1)
    bits = _integer(parameters, b"BitsPerComponent", 8)
    columns = _integer(parameters, b"Columns", 1)
    pixel = max(1, colors * bits // 8)  # bytes per pixel, the distance to the left neighbour
    row_length = (colors * bits * columns + 7) // 8
    if not 0 < row_length <= len(data) or not 0 < colors <= 32 or bits not in (1, 2, 4, 8, 16):
        raise _Unreadable
    if predictor == 2 and bits == 8:
        return _untiff(data, row_length, pixel)
    if 10 <= predictor <= 15:
        return _unpng(data, row_length, pixel)
    raise _Unreadable


def _untiff(data: bytes, row_length: int, pixel: int) -> bytes:
    rows = []
    for start in range(0, len(data), row_length):
        row = bytearray(data[start : start + row_length])
        for i in range(pixel, len(row)):
            row[i] = (row[i] + row[i - pixel]) & 0xFF
        rows.append(row)
    return b"".join(rows)


def _unpng(data: bytes, row_length: int, pixel: int) -> bytes:
    """Each row is a filter type byte (0 none, 1 sub, 2 up, 3 average, 4 Paeth) and the row."""
    rows, above = [], bytes(row_length)
    for start in range(0, len(data), row_length + 1):
        kind, row = data[start], bytearray(data[start + 1 : start + 1 + row_length])
        if kind > 4:
            raise _Unreadable
        for i in range(len(row) if kind else 0):
            left = row[i - pixel] if i >= pixel else 0
            up = above[i]
            if kind == 1:
                row[i] = (row[i] + left) & 0xFF
            elif kind == 2:
                row[i] = (row[i] + up) & 0xFF
            elif kind == 3:
                row[i] = (row[i] + (left + up) // 2) & 0xFF
            else:
                up_left = above[i - pixel] if i >= pixel else 0
                guess = left + up - up_left
                to_left, to_up = abs(guess - left), abs(guess - up)
                to_up_left = abs(guess - up_left)
                if to_left <= to_up and to_left <= to_up_left:
                    row[i] = (row[i] + left) & 0xFF
                elif to_up <= to_up_left:
                    row[i] = (row[i] + up) & 0xFF
                else:
                    row[i] = (row[i] + up_left) & 0xFF
        rows.append(row)
        above = row
    return b"".join(rows)


def _unhex(data: bytes) -> bytes:
    digits = b"".join(data.split(b">", 1)[0].split())
    try:
        return binascii.unhexlify(digits + b"0" * (len(digits) % 2))
    except binascii.Error:
        raise _Unreadable from None


def _un85(data: bytes) -> bytes:
    body = data.split(b"~>", 1)[0].strip()
    try:
        return base64.a85decode(body.removeprefix(b"<~"))
    except ValueError:
        raise _Unreadable from None


def _whole_pdf(content: bytes) -> bool:
    """Starts with a PDF header and ends with its end-of-file marker (within the last KiB)."""
    return content.startswith(b"%PDF-") and b"%%EOF" in content[-1024:]


def _whole_png(content: bytes) -> bool:
    """The PNG signature, then well-formed chunks from IHDR to IEND, and nothing after it."""
    position, first = 8, True
    while position + 12 <= len(content):
        length = int.from_bytes(content[position : position + 4], "big")
        kind = content[position + 4 : position + 8]
        if not kind.isalpha() or (first and kind != b"IHDR"):
            return False
        position += 12 + length
        first = False
        if kind == b"IEND":
            return position == len(content)
    return False


def _whole_jpeg(content: bytes) -> bool:
    """The JPEG start-of-image marker and its end-of-image marker last."""
    return content.startswith(b"\xff\xd8\xff") and content.rstrip(b"\x00").endswith(b"\xff\xd9")


_WHOLE_FILE_CHECKS = {
    ".pdf": _whole_pdf,
    ".png": _whole_png,
    ".jpg": _whole_jpeg,
    ".jpeg": _whole_jpeg,
}
