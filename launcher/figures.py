"""A picture that says what it draws: a matplotlib figure as PNG bytes with its data as JSON in the
PNG's ``Description`` text chunk, and that data read back (a reader or a test checks the numbers
without looking at pixels). A leaf: matplotlib (Agg) is imported only when drawing. The learning
curves (launcher/sweep/curves.py) and the timeline (launcher/timeline.py) draw with it.
"""

from __future__ import annotations

import json

DESCRIPTION = "Description"  # the PNG text chunk that holds the drawing's data
SIGNATURE = b"\x89PNG\r\n\x1a\n"


def pyplot():
    """matplotlib's pyplot on the Agg back end (no display); ImportError: matplotlib is not installed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def png_bytes(fig, described: dict) -> bytes:
    """``fig`` as PNG bytes carrying ``described`` (JSON) in its Description chunk; the figure is closed."""
    import io

    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format="png", metadata={DESCRIPTION: json.dumps(described)})
    finally:
        pyplot().close(fig)
    return buffer.getvalue()


def described(data: bytes) -> dict:
    """What :func:`png_bytes` was given, read back from the PNG's text chunk ({}: none there);
    ValueError: not a PNG.

    >>> described(b"not a png")
    Traceback (most recent call last):
    ...
    ValueError: not a PNG
    """
    import struct
    import zlib

    if not data.startswith(SIGNATURE):
        raise ValueError("not a PNG")
    at = len(SIGNATURE)
    while at + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[at : at + 8])
        body = data[at + 8 : at + 8 + length]
        key, _, text = body.partition(b"\0")
        if key.decode("latin-1") == DESCRIPTION and kind in (b"tEXt", b"zTXt", b"iTXt"):
            if kind == b"zTXt":
                text = zlib.decompress(text[1:])
            elif kind == b"iTXt":  # compression flag, method, language\0, translated keyword\0, text
                flag, rest = text[0], text[2:]
                text = rest.split(b"\0", 2)[2]
                text = zlib.decompress(text) if flag else text
            return json.loads(text.decode("utf-8" if kind == b"iTXt" else "latin-1"))
        at += 12 + length
    return {}
