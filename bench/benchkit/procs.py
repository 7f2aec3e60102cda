"""Child processes of the benchmarks, and where `make bench-deps` puts LiteLLM."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LITELLM_VENV = REPO / ".bench" / "litellm"
"""LiteLLM's virtualenv, built by ``make bench-deps`` (never the project's .venv)."""
LITELLM = LITELLM_VENV / "bin" / "litellm"
LITELLM_PYTHON = LITELLM_VENV / "bin" / "python"


def spawn(
    argv: list[str],
    log: Path,
    env: dict[str, str] | None = None,
    *,
    stdin: int = subprocess.DEVNULL,
    stdout: int | None = None,
) -> subprocess.Popen[bytes]:
    """A child process with its output in ``log`` (and ``env`` added to its environment).

    ``stdin=subprocess.PIPE`` and ``stdout=subprocess.PIPE`` give a child that is
    spoken to; its stderr still goes to ``log``.
    """
    with open(log, "wb") as out:
        return subprocess.Popen(
            argv,
            stdout=out if stdout is None else stdout,
            stderr=out,
            stdin=stdin,
            env={**os.environ, **(env or {})},
        )
