"""Hostile archives, written byte by byte where a library would refuse or be slow: members with
any name or type, zips whose headers lie, 100k-member archives in a second or two."""

from __future__ import annotations

import gzip
import io
import struct
import tarfile
import zipfile
import zlib
from collections.abc import Iterable
from pathlib import Path

METRICS = b'{"step": 1, "loss": 1.0}\n{"step": 2, "loss": 0.5}\n'
MB = 1 << 20


def tar_member(name: str, data: bytes = b"", **fields: object) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    for key, value in fields.items():
        setattr(info, key, value)
    return info, data


def write_tar(path: Path, members: Iterable[tuple[tarfile.TarInfo, bytes]]) -> Path:
    mode = "w:gz" if path.name.endswith(".gz") else "w"
    with tarfile.open(path, mode) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return path


def write_zip(path: Path, members: Iterable[tuple[str, bytes]]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members:
            archive.writestr(name, data)
    return path


def many_member_tar(path: Path, count: int) -> Path:
    """A .tar.gz of a small run and ``count`` one-byte files, from one header template."""
    template = tarfile.TarInfo("run/files/f0000000.txt")
    template.size = 1
    header = bytearray(template.tobuf(tarfile.USTAR_FORMAT))
    at = header.index(b"f0000000") + 1
    base = int(header[148:154].decode(), 8)  # the checksum with the digits all "0"
    with gzip.open(path, "wb", compresslevel=1) as out:
        info = tarfile.TarInfo("run/metrics.jsonl")
        info.size = len(METRICS)
        out.write(info.tobuf(tarfile.USTAR_FORMAT) + METRICS + bytes(-len(METRICS) % 512))
        parts = []
        for n in range(count):
            digits = b"%07d" % n
            header[at : at + 7] = digits
            header[148:156] = b"%06o\0 " % (base + sum(digits) - 7 * ord("0"))
            parts.append(bytes(header) + b"x" + bytes(511))
            if len(parts) == 4096:
                out.write(b"".join(parts))
                parts = []
        out.write(b"".join(parts) + bytes(1024))
    return path


def many_member_zip(path: Path, count: int) -> Path:
    """A stored zip of ``count`` one-byte files and a small run, headers packed directly."""
    crc = zlib.crc32(b"x")
    local, central = bytearray(), bytearray()
    entries = [("run/metrics.jsonl", METRICS)] + [
        (f"run/files/f{n}.txt", b"x") for n in range(count)
    ]
    for name, data in entries:
        raw = name.encode()
        checksum = crc if data == b"x" else zlib.crc32(data)
        offset = len(local)
        local += (
            struct.pack(
                "<4s5H3L2H",
                b"PK\x03\x04",
                20,
                0,
                0,
                0,
                0,
                checksum,
                len(data),
                len(data),
                len(raw),
                0,
            )
            + raw
            + data
        )
        central += (
            struct.pack(
                "<4s6H3L5H2L",
                b"PK\x01\x02",
                20,
                20,
                0,
                0,
                0,
                0,
                checksum,
                len(data),
                len(data),
                len(raw),
                0,
                0,
                0,
                0,
                0,
                offset,
            )
            + raw
        )
    n = len(entries)
    end = struct.pack(
        "<4s4H2LH", b"PK\x05\x06", 0, 0, min(n, 0xFFFF), min(n, 0xFFFF), len(central), len(local), 0
    )
    if n > 0xFFFF:  # the zip64 end records carry the true count
        zip64 = struct.pack(
            "<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, n, n, len(central), len(local)
        )
        locator = struct.pack("<4sLQL", b"PK\x06\x07", 0, len(local) + len(central), 1)
        end = zip64 + locator + end
    path.write_bytes(bytes(local + central + end))
    return path


def zip_bomb(path: Path, inflated: int) -> Path:
    """One member of ``inflated`` zero bytes (under 2 GiB), deflated to about a thousandth."""
    with (
        zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive,
        archive.open("run/metrics.jsonl", "w") as member,
    ):
        for _ in range(inflated // MB):
            member.write(bytes(MB))
    return path


def tar_gz_bomb(path: Path, inflated: int) -> Path:
    """A .tar.gz whose one member is ``inflated`` zero bytes."""
    info = tarfile.TarInfo("run/metrics.jsonl")
    info.size = inflated
    with gzip.open(path, "wb", compresslevel=9) as out:
        out.write(info.tobuf(tarfile.GNU_FORMAT))
        for _ in range(inflated // MB):
            out.write(bytes(MB))
        out.write(bytes(1024))
    return path


def lying_zip(path: Path, inflated: int, claimed: int) -> Path:
    """A deflated member of ``inflated`` zero bytes whose headers claim ``claimed`` bytes."""
    zip_bomb(path, inflated)
    data = bytearray(path.read_bytes())
    for signature, size_at in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        struct.pack_into("<L", data, data.index(signature) + size_at, claimed)
    path.write_bytes(bytes(data))
    return path


def patch_zip_flags(path: Path, *, flags: int = 0, method: int | None = None) -> Path:
    """Set general-purpose flag bits (1: encrypted) or the compression method of every
    member, in the local and central headers."""
    data = bytearray(path.read_bytes())
    for signature, flag_at, method_at in ((b"PK\x03\x04", 6, 8), (b"PK\x01\x02", 8, 10)):
        at = data.find(signature)
        while at >= 0:
            struct.pack_into(
                "<H", data, at + flag_at, struct.unpack_from("<H", data, at + flag_at)[0] | flags
            )
            if method is not None:
                struct.pack_into("<H", data, at + method_at, method)
            at = data.find(signature, at + 4)
    path.write_bytes(bytes(data))
    return path
