"""Varied routing keys, generated fast and reproducibly (numpy seeded generator): shared by tests and bench."""

from __future__ import annotations

import numpy as np


def _strings_from_codepoints(rng: np.random.Generator, count: int, max_len: int, low: int, high: int) -> list[str]:
    lengths = rng.integers(0, max_len + 1, size=count)
    points = rng.integers(low, high, size=int(lengths.sum()), dtype=np.uint32)
    surrogate = (points >= 0xD800) & (points <= 0xDFFF)
    points[surrogate] -= 0x800  # no lone surrogates: they are not valid Unicode and cannot be UTF-8 encoded
    text = points.astype("<u4").tobytes().decode("utf-32-le")
    ends = np.cumsum(lengths).tolist()
    starts = [0, *ends[:-1]]
    return [text[a:b] for a, b in zip(starts, ends, strict=True)]


def varied_string_keys(count: int, seed: int = 7) -> list[str]:
    """ASCII, BMP and astral Unicode, empty and long strings (up to 3,000 characters), in a fixed mix."""
    rng = np.random.default_rng(seed)
    ascii_n = count * 45 // 100
    bmp_n = count * 25 // 100
    astral_n = count * 15 // 100
    long_n = count * 2 // 100
    empty_n = 1000 if count >= 10_000 else 1
    ids_n = count - ascii_n - bmp_n - astral_n - long_n - empty_n
    keys = _strings_from_codepoints(rng, ascii_n, 40, 0x20, 0x7F)
    keys += _strings_from_codepoints(rng, bmp_n, 24, 0x80, 0x10000)
    keys += _strings_from_codepoints(rng, astral_n, 12, 0x1, 0x110000)
    keys += [s * 50 for s in _strings_from_codepoints(rng, long_n, 60, 0x20, 0x3000)]
    keys += [""] * empty_n
    keys += [f"user-{i}" for i in rng.integers(0, 1 << 40, size=ids_n).tolist()]
    order = rng.permutation(len(keys)).tolist()
    return [keys[i] for i in order]


def varied_int_keys(count: int, seed: int = 11) -> list[int]:
    """Small, negative, full-range int64 and the extremes."""
    rng = np.random.default_rng(seed)
    edge = [0, 1, -1, 2**31 - 1, -(2**31), 2**31, 2**63 - 1, -(2**63)]
    small = rng.integers(-1000, 1000, size=count // 4)
    wide = rng.integers(-(2**63), 2**63 - 1, size=count - count // 4 - len(edge), dtype=np.int64)
    return edge + small.tolist() + wide.tolist()
