"""Every CLI reader of outside files meets deep, wide and huge input with a defined outcome.

A reader either succeeds, rejects (``grid overlay verify``: exit 1 with a verdict), or
refuses the input with one clear line and exit 2. Never a traceback, never exit 1 for an
unreadable file, never the whole file in memory.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grid.adapters.bounded_file import UnreadableFile, read_bounded
from grid.cli import main
from grid.cli.routing_cmd import SIGNALS_FILE_BYTES_MAX
from grid.testing.strategies import json_values

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "examples" / "quickstart"
SITE = ["--site", "east"]


def grid(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def _deep_yaml(depth: int) -> str:
    return "".join("  " * i + "k:\n" for i in range(depth)) + "  " * depth + "v: 1\n"


def _deep_json(depth: int) -> str:
    return "[" * depth + "]" * depth


def _wide_json(width: int) -> str:
    return json.dumps({"providers": [{"x": i} for i in range(width)]})


def _assert_defined(result: Result, allowed: set[int]) -> None:
    assert result.exit_code in allowed, (result.exit_code, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output


# Readers: (name, command builder taking a file path, exit codes when the input is refused).
MANIFEST_READERS = {
    "validate": lambda p: ["validate", "-f", p],
    "render": lambda p: ["render", "-f", p, *SITE, "--gateway", "edge"],
    "explain": lambda p: ["explain", "-f", p, *SITE, "--model", "m"],
}
JSON_READERS = {
    "render --signals": lambda p: [
        "render",
        "-f",
        str(QUICKSTART),
        *SITE,
        "--gateway",
        "edge",
        "--signals",
        p,
    ],
    "explain --signals": lambda p: [
        "explain",
        "-f",
        str(QUICKSTART),
        *SITE,
        "--model",
        "llama-3.1-8b-instruct",
        "--signals",
        p,
    ],
    "overlay verify": lambda p: ["overlay", "verify", p],
}


@pytest.mark.parametrize("reader", sorted(MANIFEST_READERS))
def test_yaml_nested_500_levels_is_one_line_and_exit_2(reader: str, tmp_path: Path) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text(_deep_yaml(500))
    result = grid(*MANIFEST_READERS[reader](str(path)))
    _assert_defined(result, {2})
    assert "nested deeper than 64 levels" in result.stderr


@pytest.mark.parametrize("reader", sorted(JSON_READERS))
def test_json_nested_200000_levels_is_one_line_and_exit_2(reader: str, tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text(_deep_json(200_000))
    result = grid(*JSON_READERS[reader](str(path)))
    _assert_defined(result, {2})
    assert "nested deeper than 64 levels" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("reader", sorted(JSON_READERS))
def test_a_file_past_the_limit_is_refused_without_reading_it_whole(
    reader: str, tmp_path: Path
) -> None:
    path = tmp_path / "huge.json"
    with path.open("wb") as handle:  # sparse: 2 GB on paper, nothing on disk
        handle.truncate(2 * 1024**3)
    result = grid(*JSON_READERS[reader](str(path)))
    _assert_defined(result, {2})
    assert f"larger than {SIGNALS_FILE_BYTES_MAX} bytes" in result.stderr


def test_overlay_verify_of_dev_zero_exits_2() -> None:
    result = grid("overlay", "verify", "/dev/zero")
    _assert_defined(result, {2})
    assert "larger than" in result.stderr


def test_overlay_verify_keeps_exit_1_for_a_reject(tmp_path: Path) -> None:
    path = tmp_path / "not-json.json"
    path.write_text("{ this is not json")
    result = grid("overlay", "verify", str(path))
    _assert_defined(result, {1})
    assert json.loads(result.stdout)["reason"] == "malformed_structure"


def test_bounded_read_reads_at_most_the_limit_plus_one_byte(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 10)
    assert read_bounded(path, 10) == b"x" * 10
    with pytest.raises(UnreadableFile, match="larger than 9 bytes"):
        read_bounded(path, 9)
    with pytest.raises(UnreadableFile, match="larger than 1000 bytes"):
        read_bounded("/dev/zero", 1000)


_json_shapes = st.one_of(
    st.integers(1, 5000).map(_deep_json),
    st.integers(0, 20000).map(_wide_json),
    json_values(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        st.text(max_size=3),
        max_leaves=40,
    ).map(json.dumps),
    st.binary(max_size=64).map(lambda b: b.decode("latin-1")),
)
_yaml_shapes = st.one_of(
    st.integers(1, 400).map(_deep_yaml),
    st.integers(1, 400).map(lambda n: "[" * n + "]" * n + "\n"),
    st.integers(0, 3000).map(lambda n: "items:\n" + "".join(f"  - {i}\n" for i in range(n))),
    st.text(max_size=80),
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=_json_shapes, reader=st.sampled_from(sorted(JSON_READERS)))
def test_any_json_input_has_a_defined_outcome(text: str, reader: str, tmp_path: Path) -> None:
    path = tmp_path / "doc.json"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    _assert_defined(grid(*JSON_READERS[reader](str(path))), {0, 1, 2})


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=_yaml_shapes, reader=st.sampled_from(sorted(MANIFEST_READERS)))
def test_any_yaml_input_has_a_defined_outcome(text: str, reader: str, tmp_path: Path) -> None:
    path = tmp_path / "doc.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    _assert_defined(grid(*MANIFEST_READERS[reader](str(path))), {0, 2})
