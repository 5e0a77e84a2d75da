"""THE routing hash of apportion: which partition of a resource a record key belongs to.

``partition_for(key, n)`` is, bit for bit, what Spark computes natively with ``pmod(xxhash64(key), n)``:

- the hash is XXH64 (Yann Collet's xxHash, 64-bit variant) with Spark's seed **42**;
- a ``str`` is hashed as its UTF-8 bytes (Spark ``StringType`` hashes the UTF-8 bytes of the ``UTF8String``);
- ``bytes`` are hashed as they are (Spark ``BinaryType``);
- an ``int`` is hashed as an 8-byte little-endian two's-complement long, like Spark ``LongType`` (``hashLong``).
  A Python ``int`` becomes ``LongType`` when Spark infers a schema from Python data, so this is what you get by
  default. Spark hashes ``IntegerType``/``ShortType``/``ByteType`` as a 4-byte int, which gives another partition:
  cast such columns to ``long`` first (``apportion.spark.spark_partition_expr`` and ``route`` do it for you).
  Integers outside the int64 range are rejected; so is ``bool`` (ambiguous: Spark hashes ``BooleanType`` as an int);
- the 64-bit hash is read as a **signed** long and reduced with ``pmod`` (a non-negative modulo), which for a
  positive ``n`` is exactly Python's ``h % n`` on the signed value (not on the unsigned one).

It never uses Python's ``hash()`` (salted per process), so every process, machine and Spark executor agrees.
``partitions_for(keys, n)`` does the same for many keys at once. Both hash with the ``xxhash`` package (xxHash's C
code): per key an order of magnitude faster than the pure-Python XXH64 (a whole ``partition_for`` call 6-13x) and,
over a batch of strings, 1.7-2.5x faster than the numpy-vectorised XXH64 this module carried before. A batch of ints
(all 8 bytes wide) keeps the numpy kernel below when numpy is installed: there it is as fast as a C call per key
(bench/hash_bench.py; numbers in bench/README.md). ``xxh64`` below is the
pure-Python reference of the algorithm, kept as the documented definition: the tests check it against published
vectors and the ``xxhash`` package, the hot path against it and against a real Spark session on over a million keys.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from itertools import repeat
from typing import Any

from xxhash import xxh64_intdigest

from apportion.errors import InvalidRequest

SPARK_SEED = 42
"""Seed of Spark's ``xxhash64`` SQL function (``XxHash64(children, seed = 42L)``)."""

_MASK = 0xFFFFFFFFFFFFFFFF
_P1 = 0x9E3779B185EBCA87
_P2 = 0xC2B2AE3D27D4EB4F
_P3 = 0x165667B19E3779F9
_P4 = 0x85EBCA77C2B2AE63
_P5 = 0x27D4EB2F165667C5
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_pack_long = struct.Struct("<q").pack
_TWO_63 = 1 << 63
_TWO_64 = 1 << 64

Key = str | int | bytes


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _MASK


def _round(acc: int, lane: int) -> int:
    acc = (acc + lane * _P2) & _MASK
    return (_rotl(acc, 31) * _P1) & _MASK


def _merge(acc: int, val: int) -> int:
    acc ^= _round(0, val)
    return (acc * _P1 + _P4) & _MASK


def _avalanche(h: int) -> int:
    h ^= h >> 33
    h = (h * _P2) & _MASK
    h ^= h >> 29
    h = (h * _P3) & _MASK
    h ^= h >> 32
    return h


def xxh64(data: bytes, seed: int = SPARK_SEED) -> int:
    """XXH64 of ``data`` as an unsigned 64-bit int (the reference algorithm; Spark's ``hashUnsafeBytes``)."""
    n = len(data)
    seed &= _MASK
    pos = 0
    if n >= 32:
        v1 = (seed + _P1 + _P2) & _MASK
        v2 = (seed + _P2) & _MASK
        v3 = seed
        v4 = (seed - _P1) & _MASK
        limit = n - 32
        while pos <= limit:
            a, b, c, d = struct.unpack_from("<4Q", data, pos)
            v1 = _round(v1, a)
            v2 = _round(v2, b)
            v3 = _round(v3, c)
            v4 = _round(v4, d)
            pos += 32
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _MASK
        h = _merge(h, v1)
        h = _merge(h, v2)
        h = _merge(h, v3)
        h = _merge(h, v4)
    else:
        h = (seed + _P5) & _MASK
    h = (h + n) & _MASK
    while pos + 8 <= n:
        (lane,) = struct.unpack_from("<Q", data, pos)
        h ^= _round(0, lane)
        h = (_rotl(h, 27) * _P1 + _P4) & _MASK
        pos += 8
    if pos + 4 <= n:
        (lane32,) = struct.unpack_from("<I", data, pos)
        h ^= (lane32 * _P1) & _MASK
        h = (_rotl(h, 23) * _P2 + _P3) & _MASK
        pos += 4
    while pos < n:
        h ^= (data[pos] * _P5) & _MASK
        h = (_rotl(h, 11) * _P1) & _MASK
        pos += 1
    return _avalanche(h)


def _key_bytes(key: object) -> bytes:
    """The bytes Spark hashes for ``key`` (see the module docstring), or InvalidRequest."""
    if isinstance(key, str):
        try:
            return key.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidRequest("key", f"string is not valid Unicode (lone surrogate?): {exc.reason}") from exc
    if isinstance(key, bytes):
        return key
    if isinstance(key, bool) or not isinstance(key, int):
        raise InvalidRequest("key", f"must be str, int or bytes, got {type(key).__name__}")
    if not _INT64_MIN <= key <= _INT64_MAX:
        raise InvalidRequest("key", f"int {key} is outside the int64 range of Spark's LongType")
    return _pack_long(key)


def _check_n(n: object) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InvalidRequest("n", f"the number of partitions must be an int >= 1, got {n!r}")
    return n


def _signed(h: int) -> int:
    return h - _TWO_64 if h >= _TWO_63 else h


def spark_xxhash64(key: Key) -> int:
    """What Spark's ``xxhash64(key)`` returns: a signed 64-bit int."""
    return _signed(xxh64_intdigest(_key_bytes(key), SPARK_SEED))


def partition_for(key: Key, n: int) -> int:
    """The partition in ``range(n)`` of ``key``: Spark's ``pmod(xxhash64(key), n)``."""
    if type(key) is str and type(n) is int and n > 0:  # the common call, without the checks' function calls
        try:
            h = xxh64_intdigest(key.encode(), SPARK_SEED)
        except UnicodeEncodeError:
            pass  # the general path names the problem
        else:
            return (h - _TWO_64 if h >= _TWO_63 else h) % n
    return _signed(xxh64_intdigest(_key_bytes(key), SPARK_SEED)) % _check_n(n)


def partitions_for(keys: Iterable[Key], n: int) -> list[int]:
    """``[partition_for(k, n) for k in keys]``, with the per-key work done by C-level passes where the keys allow."""
    _check_n(n)
    keys = keys if isinstance(keys, list | tuple) else list(keys)
    kinds = set(map(type, keys))
    if kinds == {int}:
        longs = _int64_array(keys)
        if longs is not None:
            return (_xxh64_longs(longs).view("int64") % n).tolist()  # type: ignore[no-any-return]
    try:
        if kinds == {str}:
            data = list(map(str.encode, keys))
        elif kinds == {int}:
            data = list(map(_pack_long, keys))
        else:
            data = list(map(_key_bytes, keys))
    except (UnicodeEncodeError, struct.error):
        data = list(map(_key_bytes, keys))  # raises InvalidRequest naming the bad key
    return [(h - _TWO_64 if h >= _TWO_63 else h) % n for h in map(xxh64_intdigest, data, repeat(SPARK_SEED))]


def _int64_array(keys: Sequence[object]) -> Any:
    """The keys as a numpy int64 array, or None without numpy or when one is outside the int64 range."""
    try:
        import numpy as np
    except ImportError:  # numpy comes with the spark extra (pyarrow); xxhash serves without it
        return None
    try:
        return np.array(keys, dtype=np.int64)
    except OverflowError:
        return None  # the general path raises InvalidRequest naming the key


def _xxh64_longs(longs: Any, seed: int = SPARK_SEED) -> Any:
    """Spark's ``hashLong`` of every int64 of a numpy array: XXH64 of its 8 little-endian bytes."""
    import numpy as np

    blob = np.frombuffer(longs.astype("<i8").tobytes() + bytes(8), dtype=np.uint8)
    windows = np.lib.stride_tricks.as_strided(blob, shape=(blob.size - 7, 8), strides=(1, 1), writeable=False)
    with np.errstate(over="ignore"):
        return _xxh64_rows(np, blob, windows, np.arange(longs.size, dtype=np.int64) * 8, 8, seed)


def _xxh64_rows(np: Any, blob: Any, windows: Any, base: Any, width: int, seed: int) -> Any:
    """XXH64 of the ``width`` bytes at each address of ``base`` in ``blob``, with wrapping numpy uint64 arithmetic.

    ``windows[a]`` is the 8 bytes at address ``a`` (a strided view, no copy), so a lane is one gather.
    """
    u64 = np.uint64
    p1, p2, p3, p4, p5 = (u64(p) for p in (_P1, _P2, _P3, _P4, _P5))
    m = base.shape[0]

    def rotl(x: Any, r: int) -> Any:
        return (x << u64(r)) | (x >> u64(64 - r))

    def lane64(pos: int) -> Any:
        return windows[base + pos].view("<u8")[:, 0]

    def rnd(acc: Any, lane: Any) -> Any:
        return rotl(acc + lane * p2, 31) * p1

    pos = 0
    if width >= 32:
        v1 = np.full(m, (seed + _P1 + _P2) & _MASK, dtype=np.uint64)
        v2 = np.full(m, (seed + _P2) & _MASK, dtype=np.uint64)
        v3 = np.full(m, seed & _MASK, dtype=np.uint64)
        v4 = np.full(m, (seed - _P1) & _MASK, dtype=np.uint64)
        while pos + 32 <= width:
            v1 = rnd(v1, lane64(pos))
            v2 = rnd(v2, lane64(pos + 8))
            v3 = rnd(v3, lane64(pos + 16))
            v4 = rnd(v4, lane64(pos + 24))
            pos += 32
        h = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18)
        for v in (v1, v2, v3, v4):
            h = (h ^ rotl(v * p2, 31) * p1) * p1 + p4
    else:
        h = np.full(m, (seed + _P5) & _MASK, dtype=np.uint64)
    h = h + u64(width)
    while pos + 8 <= width:
        h = h ^ rotl(lane64(pos) * p2, 31) * p1
        h = rotl(h, 27) * p1 + p4
        pos += 8
    if pos + 4 <= width:
        lane32 = (lane64(pos) & u64(0xFFFFFFFF)) if m else np.zeros(0, dtype=np.uint64)
        h = h ^ (lane32 * p1)
        h = rotl(h, 23) * p2 + p3
        pos += 4
    while pos < width:
        h = h ^ (blob[base + pos].astype(np.uint64) * p5)
        h = rotl(h, 11) * p1
        pos += 1
    h = h ^ (h >> u64(33))
    h = h * p2
    h = h ^ (h >> u64(29))
    h = h * p3
    h = h ^ (h >> u64(32))
    return h


__all__ = ["SPARK_SEED", "Key", "partition_for", "partitions_for", "spark_xxhash64", "xxh64"]
