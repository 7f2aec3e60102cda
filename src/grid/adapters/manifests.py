"""Reading CR YAML from disk: a single file or a directory of ``*.yaml``.

This is the I/O half of manifest loading; `grid.core.resources.manifest` does the parsing and
cross-checking. A directory is read non-recursively (as ``kubectl apply -f DIR``
does), in name order so problems come out in a stable order; only ``*.yaml`` and
``*.yml`` files are read, so a ``signals.json`` beside the CRs is left alone.
Unreadable input is reported as problems in the same one-line form as bad content.
"""

from __future__ import annotations

import os
from pathlib import Path

from grid.adapters.bounded_file import UnreadableFile, read_bounded
from grid.core.resources.manifest import (
    NO_FIELD,
    NO_RESOURCE,
    ManifestError,
    Manifests,
    Problem,
    Source,
    parse_manifests,
)
from grid.errors import GridError

MANIFEST_SUFFIXES = (".yaml", ".yml")
"""File name endings read from a directory."""

MANIFEST_FILE_BYTES_MAX = 4 * 1024 * 1024
"""Largest manifest file read, in bytes. CR sets are small; the cap bounds memory
when a path points at something that is not a manifest."""


def read_sources(path: str | os.PathLike[str]) -> list[Source]:
    """Read the manifest file at `path`, or every ``*.yaml`` file directly in it.

    Raises `ManifestError` when the path is missing, empty of manifests, too large or
    unreadable; each problem names the file.
    """
    root = Path(path)
    if root.is_dir():
        files = sorted(p for p in root.iterdir() if p.suffix in MANIFEST_SUFFIXES and p.is_file())
        if not files:
            raise ManifestError([_problem(str(root), "no *.yaml files in this directory")])
    elif root.exists():
        files = [root]
    else:
        raise ManifestError([_problem(str(root), "no such file or directory")])
    sources: list[Source] = []
    problems: list[Problem] = []
    for file in files:
        try:
            sources.append(Source(str(file), _read_text(file)))
        except _Unreadable as exc:
            problems.append(_problem(str(file), str(exc)))
    if problems:
        raise ManifestError(problems)
    return sources


def load_manifests(path: str | os.PathLike[str]) -> Manifests:
    """Read and validate the manifests at `path` (a file or a directory of ``*.yaml``).

    Raises `ManifestError` listing every problem (file, resource, field) found.
    """
    return parse_manifests(read_sources(path))


class _Unreadable(GridError):
    """A file could not be read as UTF-8 text within the size limit."""


def _read_text(file: Path) -> str:
    try:
        data = read_bounded(file, MANIFEST_FILE_BYTES_MAX)
    except UnreadableFile as exc:
        raise _Unreadable(exc.message) from exc
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Unreadable(f"not UTF-8 text (byte offset {exc.start})") from exc


def _problem(file: str, message: str) -> Problem:
    return Problem(file, NO_RESOURCE, NO_FIELD, message)
