"""Every exception class Grid defines is a GridError, so callers catch one family."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import grid
from grid.errors import GridError

SKIPPED = ("grid.proto_gen", "grid.__main__")
"""Generated protobuf code, and the entry point (importing it runs the CLI)."""


def test_every_exception_class_is_a_grid_error() -> None:
    outside = []
    for info in pkgutil.walk_packages(grid.__path__, "grid."):
        if info.name.startswith(SKIPPED):
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == info.name
                and not issubclass(value, GridError)
            ):
                outside.append(f"{info.name}.{name}")
    assert outside == []
