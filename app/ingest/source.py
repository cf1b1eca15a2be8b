"""Read-only views of a stored source: a directory, a single file, or a tar/zip archive.

Nothing is extracted to disk. Archive members are checked before anything is read: absolute
paths and ``..`` are refused, links and device files are skipped with a warning, and sizes are
bounded (total, member count and compression ratio) so a decompression bomb fails fast.
"""

from __future__ import annotations

import gzip
import re
import stat
import tarfile
import tempfile
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Protocol

from app.ingest.errors import IngestError, Warnings

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip")
# Links a tracker keeps to its own debug logs (wandb): skipped without a warning.
TOOL_LINKS = frozenset({"latest-run", "debug.log", "debug-internal.log", "debug-core.log"})
# What reading a member of a damaged archive raises: a truncated or corrupt tar, a zip member
# whose checksum or deflate stream is wrong, a corrupt gzip stream, a file gone from a folder.
READ_ERRORS = (tarfile.TarError, zipfile.BadZipFile, EOFError, zlib.error, OSError)
# Zip compression methods zipfile reads (stored, deflate, bzip2, lzma); others are skipped.
ZIP_METHODS = frozenset(
    {zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA}
)
_ZIP_ENCRYPTED = 0x1


@dataclass(frozen=True)
class Limits:
    max_source_bytes: int
    max_members: int
    max_compression_ratio: float
    max_line_bytes: int


class SourceTree:
    """Regular files by relative POSIX path, and a way to open each one."""

    def __init__(self, name: str, sizes: dict[str, int]) -> None:
        self.name = name
        self.sizes = sizes

    def files(self) -> list[str]:
        return sorted(self.sizes)

    def open(self, path: str) -> IO[bytes]:
        raise NotImplementedError

    @property
    def total_bytes(self) -> int:
        return sum(self.sizes.values())


class DirectoryTree(SourceTree):
    def __init__(self, root: Path, warnings: Warnings, limits: Limits) -> None:
        sizes: dict[str, int] = {}
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(root).as_posix()
            mode = path.lstat().st_mode
            if stat.S_ISDIR(mode):
                continue
            if not stat.S_ISREG(mode):
                if not (stat.S_ISLNK(mode) and path.name in TOOL_LINKS):
                    warnings.add(
                        f"{rel}: not a regular file (link or device), skipped", kind="link"
                    )
                continue
            sizes[rel] = path.stat().st_size
            if len(sizes) > limits.max_members:
                raise IngestError(f"more than {limits.max_members} files", file=root.name)
        super().__init__(root.name, sizes)
        self.root = root

    def open(self, path: str) -> IO[bytes]:
        return (self.root / path).open("rb")


class SingleFileTree(SourceTree):
    def __init__(self, path: Path, member_name: str) -> None:
        # named as the user named the file (the stored copy is named by its digest)
        super().__init__(member_name, {member_name: path.stat().st_size})
        self.path = path

    def open(self, path: str) -> IO[bytes]:
        return self.path.open("rb")


class TarTree(SourceTree):
    def __init__(self, path: Path, display: str, warnings: Warnings, limits: Limits) -> None:
        self._tar = tarfile.open(path, "r:")  # noqa: SIM115 - closed by close()
        self._members: dict[str, tarfile.TarInfo] = {}
        total = 0
        for count, info in enumerate(self._tar, start=1):
            if count > limits.max_members:
                raise IngestError(
                    f"archive has more than {limits.max_members} members", file=display
                )
            name = _safe_member_name(info.name, display)
            if info.isdir():
                continue
            if not info.isfile():
                what = "link" if (info.issym() or info.islnk()) else "special file"
                warnings.add(f"{display}: member '{info.name}' is a {what}, skipped", kind="link")
                continue
            total += info.size
            if total > limits.max_source_bytes:
                raise IngestError(
                    f"archive unpacks to more than {limits.max_source_bytes} bytes", file=display
                )
            if name in self._members:
                _warn_repeated(warnings, display, info.name)
            self._members[name] = info
        super().__init__(display, {n: i.size for n, i in self._members.items()})

    def open(self, path: str) -> IO[bytes]:
        handle = self._tar.extractfile(self._members[path])
        assert handle is not None
        return handle

    def close(self) -> None:
        self._tar.close()


class ZipTree(SourceTree):
    def __init__(self, path: Path, display: str, warnings: Warnings, limits: Limits) -> None:
        try:
            self._zip = zipfile.ZipFile(path)
        except zipfile.BadZipFile as exc:
            raise IngestError(f"not a valid zip archive ({exc})", file=display) from None
        infos = self._zip.infolist()
        if len(infos) > limits.max_members:
            raise IngestError(f"archive has more than {limits.max_members} members", file=display)
        self._members: dict[str, zipfile.ZipInfo] = {}
        total = 0
        packed = max(path.stat().st_size, 1)
        for info in infos:
            name = _safe_member_name(info.filename, display)
            if info.is_dir():
                continue
            kind = (info.external_attr >> 16) & 0o170000
            if kind and kind != stat.S_IFREG:
                warnings.add(f"{display}: member '{info.filename}' is a link, skipped", kind="link")
                continue
            if info.flag_bits & _ZIP_ENCRYPTED or info.compress_type not in ZIP_METHODS:
                why = (
                    "is encrypted"
                    if info.flag_bits & _ZIP_ENCRYPTED
                    else f"uses compression method {info.compress_type}, which cannot be read"
                )
                warnings.add(f"{display}: member '{info.filename}' {why}; skipped", kind="zip")
                continue
            total += info.file_size
            if name in self._members:
                _warn_repeated(warnings, display, info.filename)
            self._members[name] = info
        if total > limits.max_source_bytes:
            raise IngestError(
                f"archive unpacks to more than {limits.max_source_bytes} bytes", file=display
            )
        if total > 1 << 20 and total / packed > limits.max_compression_ratio:
            raise IngestError(
                f"archive inflates {total / packed:.0f}x (limit"
                f" {limits.max_compression_ratio:.0f}x); refusing a likely decompression bomb",
                file=display,
            )
        super().__init__(display, {n: i.file_size for n, i in self._members.items()})

    def open(self, path: str) -> IO[bytes]:
        return self._zip.open(self._members[path])

    def close(self) -> None:
        self._zip.close()


def _warn_repeated(warnings: Warnings, display: str, name: str) -> None:
    warnings.add(
        f"{display}: member '{name}' appears more than once; the last copy is read",
        kind="repeated-member",
    )


def _safe_member_name(name: str, display: str) -> str:
    pure = PurePosixPath(name.replace("\\", "/"))
    if pure.is_absolute() or name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name):
        raise IngestError(f"archive member '{name}' has an absolute path; refused", file=display)
    if ".." in pure.parts:
        raise IngestError(
            f"archive member '{name}' points outside the archive (..); refused", file=display
        )
    parts = [p for p in pure.parts if p not in ("", ".")]
    return "/".join(parts)


def archive_kind(filename: str) -> str | None:
    lower = filename.lower()
    if lower.endswith((".tar.gz", ".tgz")):
        return "tar.gz"
    if lower.endswith(".tar"):
        return "tar"
    if lower.endswith(".zip"):
        return "zip"
    return None


@contextmanager
def open_source(
    path: Path, kind: str, display: str, warnings: Warnings, limits: Limits, scratch: Path
) -> Iterator[SourceTree]:
    """Open a stored source of ``kind`` (directory, file, tar, tar.gz, zip) as a tree."""
    if kind == "directory":
        yield DirectoryTree(path, warnings, limits)
    elif kind == "file":
        yield SingleFileTree(path, display)
    elif kind == "tar":
        tree = _open_tar(path, display, warnings, limits)
        try:
            yield tree
        finally:
            tree.close()
    elif kind == "tar.gz":
        with tempfile.TemporaryDirectory(dir=scratch) as tmp:
            plain = Path(tmp) / "source.tar"
            _gunzip_bounded(path, plain, display, limits)
            tree = _open_tar(plain, display, warnings, limits)
            try:
                yield tree
            finally:
                tree.close()
    elif kind == "zip":
        ztree = ZipTree(path, display, warnings, limits)
        try:
            yield ztree
        finally:
            ztree.close()
    else:
        raise IngestError(f"unknown source kind '{kind}'", file=display)


def _open_tar(path: Path, display: str, warnings: Warnings, limits: Limits) -> TarTree:
    try:
        return TarTree(path, display, warnings, limits)
    except tarfile.TarError as exc:
        raise IngestError(f"not a valid tar archive ({exc})", file=display) from None


def _gunzip_bounded(src: Path, dst: Path, display: str, limits: Limits) -> None:
    packed = max(src.stat().st_size, 1)
    budget = min(limits.max_source_bytes, int(max(packed * limits.max_compression_ratio, 1 << 24)))
    written = 0
    try:
        with gzip.open(src, "rb") as fin, dst.open("wb") as fout:
            while chunk := fin.read(1 << 20):
                written += len(chunk)
                if written > budget:
                    raise IngestError(
                        f"archive inflates past {budget} bytes ({packed} packed); refusing a likely"
                        " decompression bomb",
                        file=display,
                    )
                fout.write(chunk)
    except (OSError, EOFError, zlib.error) as exc:
        raise IngestError(f"not a valid gzip archive ({exc})", file=display) from None


class Sink(Protocol):
    def write(self, data: bytes, /) -> int: ...


def copy_limited(src: IO[bytes], dst: Sink, limit: int, display: str) -> int:
    """Copy at most ``limit`` bytes; more is an error naming ``display``."""
    total = 0
    while chunk := src.read(1 << 20):
        total += len(chunk)
        if total > limit:
            raise IngestError(f"larger than the limit of {limit} bytes", file=display)
        dst.write(chunk)
    return total


__all__ = [
    "ARCHIVE_SUFFIXES",
    "READ_ERRORS",
    "Limits",
    "SourceTree",
    "archive_kind",
    "copy_limited",
    "open_source",
]
