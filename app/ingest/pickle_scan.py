"""Plain values from a pickle or ``torch.save`` file, read without unpickling it:
:func:`pickled_scalars` walks the opcode stream, so nothing is imported or executed. The
Hugging Face Trainer reader takes ``training_args.bin``'s gradient accumulation and seeds from it,
the Megatron reader a checkpoint's saved ``args``.
"""

from __future__ import annotations

import io
import pickletools
import struct
import zipfile
import zlib
from collections.abc import Collection
from typing import IO, Any

_MAX_PICKLE_BYTES = 64 << 20

_SCALAR_OPS = {"INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "FLOAT", "BINFLOAT"}
_CONSTANT_OPS = {"NEWTRUE": True, "NEWFALSE": False, "NONE": None}
_STRING_OPS = {
    "SHORT_BINUNICODE",
    "BINUNICODE",
    "BINUNICODE8",
    "UNICODE",
    "BINSTRING",
    "SHORT_BINSTRING",
}
_MEMO_OPS = {"PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"}
# What a damaged or hostile zip raises from zipfile: bad headers (negative offsets, names that
# are not UTF-8), unsupported compression or encryption, a corrupt deflate stream.
_ZIP_DAMAGE = (
    zipfile.BadZipFile,
    OSError,
    EOFError,
    ValueError,
    NotImplementedError,
    RuntimeError,
    zlib.error,
    struct.error,
)


def pickled_scalars(
    stream: IO[bytes], keys: Collection[str], *, limit: int = _MAX_PICKLE_BYTES
) -> dict[str, Any]:
    """Scalar values (numbers, booleans, None) stored under ``keys`` in a pickle or a
    ``torch.save`` zip, found by walking the opcode stream: nothing is imported or executed, so
    it is safe on untrusted files. The first occurrence of a key wins (``args.seed`` of a
    Megatron checkpoint, ``seed`` of a pickled ``TrainingArguments``). Unreadable input gives
    what was found before it."""
    head = stream.read(4)
    data: bytes
    if head == b"PK\x03\x04":
        try:
            stream.seek(0)
            with zipfile.ZipFile(stream) as archive:
                names = [n for n in archive.namelist() if n.endswith("data.pkl")]
                if not names:
                    return {}
                info = archive.getinfo(min(names, key=len))
                if info.file_size > limit:
                    return {}
                data = archive.read(info)
        except _ZIP_DAMAGE:
            return {}
    else:
        data = head + stream.read(limit)
    wanted = set(keys)
    found: dict[str, Any] = {}
    pending: str | None = None
    try:
        for opcode, arg, _ in pickletools.genops(io.BytesIO(data)):
            name = opcode.name
            if name in _MEMO_OPS:
                continue
            if pending is not None and (name in _SCALAR_OPS or name in _CONSTANT_OPS):
                found[pending] = _CONSTANT_OPS.get(name, arg)
                if len(found) == len(wanted):
                    break
            pending = None
            if name in _STRING_OPS and arg in wanted and arg not in found:
                pending = arg
    except (ValueError, EOFError, struct.error, UnicodeDecodeError):
        pass  # the end of a legacy torch file's pickles, or damage: keep what was found
    return found
