"""Canonical JSON and digests, byte-compatible with OpenClaw's stable stringify.

Values come in two flavours. *Wire values* were decoded by `wire.py`, which turns every
JSON float literal into a `msgspec.Raw` holding its JavaScript spelling; they take the
fast path (msgspec's sorted encoder plus a cheap check). Any other Python value
(floats, huge ints, lone surrogates, non-BMP keys) goes through `canon_exact`, the
reference implementation that the fast path is property-tested against.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Any

import msgspec

UNDEFINED = msgspec.Raw(b"undefined")
"""An absent value; serialized as the bare word `undefined`, as JavaScript does."""

_MAX_SAFE = 2**53
_encode_sorted = msgspec.json.Encoder(order="sorted").encode
# Anything that may differ from JavaScript in the fast encoding: a run of 16+ digits
# (an int beyond 2^53, or a harmless string) and bytes of code points >= U+D000 (key
# order by UTF-16 units differs from code point order only there). Checked with two C
# scans (translate, then a substring search) instead of a regex: it runs on every hash.
_DIGITS_AS_ZERO = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_SIXTEEN_DIGITS = b"0" * 16
_HIGH_PLANE = re.compile(rb"[\xed-\xf4]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def js_number(x: float) -> str:
    """Format a finite double as JavaScript's Number#toString does."""
    if x == 0:
        return "0"
    r = repr(x)
    if "e" not in r and 1e-6 <= abs(x) < 1e21:
        # Python writes fixed notation here exactly as JavaScript does, but for "N.0".
        return r[:-2] if r.endswith(".0") else r
    r = repr(abs(x))
    mant, _, exp = r.partition("e")
    ip, _, fp = mant.partition(".")
    digits = ip + fp
    point = len(ip) + (int(exp) if exp else 0)
    stripped = digits.lstrip("0")
    point -= len(digits) - len(stripped)
    s = stripped.rstrip("0") or "0"
    k, n = len(s), point
    if k <= n <= 21:
        out = s + "0" * (n - k)
    elif 0 < n <= 21:
        out = s[:n] + "." + s[n:]
    elif -6 < n <= 0:
        out = "0." + "0" * (-n) + s
    else:
        e = n - 1
        out = (s if k == 1 else s[0] + "." + s[1:]) + ("e+" if e >= 0 else "e-") + str(abs(e))
    return "-" + out if x < 0 else out


# Bounded memos of pure functions that run on every event. A call's result carries the
# call's params again, so their floats and their digest are always seen twice; a loop
# repeats its outcome too. Emptied when full; long values are not kept.
_MEMO_ENTRIES = 4096
_MEMO_MAX_BYTES = 2048
_DIGESTS: dict[bytes, str] = {}
_sha256 = hashlib.sha256


class _FloatMemo(dict[str, msgspec.Raw]):
    """The float literals' memo. A decoder calls its hook for every float literal; with
    `_FLOATS.__getitem__` as the hook a literal seen before costs a lookup in C, and
    only a new one runs Python (`__missing__`)."""

    def __missing__(self, text: str) -> msgspec.Raw:
        x = float(text)
        if math.isfinite(x):
            raw = msgspec.Raw(js_number(x).encode())
        else:
            raw = msgspec.Raw(json.dumps("NaN" if x != x else ("Infinity" if x > 0 else "-Infinity")).encode())
        if len(text) <= 64:
            if len(self) >= _MEMO_ENTRIES:
                self.clear()
            self[text] = raw
        return raw


_FLOATS = _FloatMemo()
FLOAT_HOOK = _FLOATS.__getitem__
"""js_float_literal, as a decoder's float_hook."""


def js_float_literal(text: str) -> msgspec.Raw:
    """A JSON float literal as the canonical bytes JavaScript would write for it."""
    return _FLOATS[text]


def _js_int(i: int) -> str:
    if -_MAX_SAFE <= i <= _MAX_SAFE:
        return str(i)
    try:
        return js_number(float(i))
    except OverflowError:
        return '"Infinity"' if i > 0 else '"-Infinity"'


def _sanitize(s: str) -> str:
    if not _LONE_SURROGATE.search(s):
        return s
    # Join well-formed pairs first, then drop what is left alone.
    s = s.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    return _LONE_SURROGATE.sub("", s)


def _utf16_key(s: str) -> bytes:
    return s.encode("utf-16-be", "surrogatepass")


def _js_string(s: str) -> str:
    return json.dumps(_sanitize(s), ensure_ascii=False)


def _exact(v: Any, out: list[str]) -> None:
    if isinstance(v, dict):
        out.append("{")
        first = True
        for key in sorted(v, key=_utf16_key):
            if not first:
                out.append(",")
            first = False
            out.append(_js_string(key))
            out.append(":")
            _exact(v[key], out)
        out.append("}")
    elif isinstance(v, (list, tuple)):
        out.append("[")
        for i, item in enumerate(v):
            if i:
                out.append(",")
            _exact(item, out)
        out.append("]")
    else:
        out.append(_exact_scalar(v))


def _exact_scalar(v: Any) -> str:
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, str):
        return _js_string(v)
    if isinstance(v, int):
        return _js_int(v)
    if isinstance(v, float):
        if math.isfinite(v):
            return js_number(v)
        return _js_string("NaN" if v != v else ("Infinity" if v > 0 else "-Infinity"))
    if isinstance(v, msgspec.Raw):
        return bytes(v).decode()
    if v is msgspec.UNSET:
        return "undefined"
    raise TypeError(f"cannot canonicalize a {type(v).__name__}")


def canon_exact(v: Any) -> bytes:
    """Canonical JSON of any JSON-like Python value (the reference implementation)."""
    out: list[str] = []
    _exact(v, out)
    return "".join(out).encode("utf-8")


def canon(v: Any) -> bytes:
    """Canonical JSON of a wire value (floats already `Raw`); exact for anything else."""
    if v is msgspec.UNSET:
        return b"undefined"
    try:
        b = _encode_sorted(v)
    except (TypeError, UnicodeEncodeError, msgspec.EncodeError):
        return canon_exact(v)
    if _SIXTEEN_DIGITS in b.translate(_DIGITS_AS_ZERO) or (not b.isascii() and _HIGH_PLANE.search(b)):
        return canon_exact(v)
    return b


def digest(v: Any) -> str:
    """SHA-256 hex of the canonical JSON of a wire value.

    The memo is keyed by the sorted encoding before canon's checks: the checks and the
    exact path are functions of those bytes for a wire value, so equal bytes mean an
    equal digest, and a hit skips the checks as well as the hash. A value the fast
    encoder refuses (UNSET, a float, a huge int) is hashed through `canon`, unmemoised."""
    try:
        key = _encode_sorted(v)
    except (TypeError, UnicodeEncodeError, msgspec.EncodeError):
        return _sha256(canon(v)).hexdigest()
    h = _DIGESTS.get(key)
    if h is None:
        if _SIXTEEN_DIGITS in key.translate(_DIGITS_AS_ZERO) or (not key.isascii() and _HIGH_PLANE.search(key)):
            h = _sha256(canon_exact(v)).hexdigest()
        else:
            h = _sha256(key).hexdigest()
        if len(key) <= _MEMO_MAX_BYTES:
            if len(_DIGESTS) >= _MEMO_ENTRIES:
                _DIGESTS.clear()
            _DIGESTS[key] = h
    return h
