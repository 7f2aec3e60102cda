"""`grid render`, `grid explain` and `grid overlay verify` end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from grid.cli import main

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "examples" / "quickstart"
SIGNALS = QUICKSTART / "signals.json"
BAD = ROOT / "examples" / "bad"
FIXTURES = ROOT / "tests" / "fixtures" / "overlay"
RENDER = ["render", "-f", str(QUICKSTART), "--site", "east", "--gateway", "edge"]


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def test_render_prints_an_envelope_that_verify_accepts(tmp_path: Path) -> None:
    code, out, err = run(*RENDER, "--signals", str(SIGNALS))
    assert code == 0, err
    envelope = json.loads(out)
    assert envelope["schema_version"] == "1.0.0"
    assert envelope["scope"] == {
        "network": "grid-demo",
        "gateway": "edge",
        "namespace": "grid-system",
        "local_site": "east",
    }
    assert envelope["overlay"]["candidates"], "the quickstart renders candidates"
    path = tmp_path / "grid-overlay.json"
    path.write_text(out)
    code, out, _ = run(
        "overlay",
        "verify",
        str(path),
        "--network",
        "grid-demo",
        "--gateway",
        "edge",
        "--namespace",
        "grid-system",
        "--local-site",
        "east",
    )
    assert code == 0
    assert json.loads(out) == {
        "verdict": "accept",
        "reason": None,
        "revision": envelope["revision"]["value"],
    }
    code, out, err = run("overlay", "verify", str(path), "--gateway", "other")
    assert code == 1
    assert json.loads(out) == {"verdict": "reject", "reason": "scope_mismatch", "revision": None}
    assert "scope.gateway" in err


def test_rendering_twice_gives_the_same_revision() -> None:
    first = json.loads(run(*RENDER, "--signals", str(SIGNALS))[1])
    second = json.loads(run(*RENDER, "--signals", str(SIGNALS))[1])
    assert first["revision"] == second["revision"]
    without_signals = json.loads(run(*RENDER)[1])
    assert without_signals["revision"] != first["revision"]


def test_real_process_render_pipes_into_verify(tmp_path: Path) -> None:
    command = [sys.executable, "-c", "from grid.cli import main; main()"]
    rendered = subprocess.run(
        [*command, *RENDER, "--signals", str(SIGNALS)],
        capture_output=True,
        check=True,
        timeout=60,
        cwd=ROOT,
    )
    path = tmp_path / "envelope.json"
    path.write_bytes(rendered.stdout)
    verified = subprocess.run(
        [*command, "overlay", "verify", str(path)], capture_output=True, timeout=60
    )
    assert verified.returncode == 0, verified.stderr
    assert json.loads(verified.stdout)["verdict"] == "accept"


@pytest.mark.parametrize(
    ("name", "code", "verdict"),
    [
        ("accept_legacy_bare_overlay.json", 0, "accept_legacy"),
        ("reject_digest_mismatch.json", 1, "reject"),
        ("reject_missing_schema_version.json", 1, "reject"),
    ],
)
def test_verify_exit_codes(name: str, code: int, verdict: str) -> None:
    got_code, out, _ = run("overlay", "verify", str(FIXTURES / name))
    assert got_code == code
    assert json.loads(out)["verdict"] == verdict


def test_verify_of_non_json_is_malformed(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text("{not json")
    code, out, _ = run("overlay", "verify", str(path))
    assert code == 1
    assert json.loads(out)["reason"] == "malformed_structure"
    path.write_text('{"network": NaN}')
    assert json.loads(run("overlay", "verify", str(path))[1])["reason"] == "malformed_structure"


def test_explain_json_lists_every_candidate_for_the_model() -> None:
    code, out, err = run(
        "explain",
        "-f",
        str(QUICKSTART),
        "--site",
        "east",
        "--model",
        "llama-3.1-8b-instruct",
        "--signals",
        str(SIGNALS),
        "-o",
        "json",
    )
    assert code == 0, err
    result = json.loads(out)
    assert result["model"] == "llama-3.1-8b-instruct"
    assert result["local_site"] == "east"
    rows = result["candidates"]
    assert {r["model"] for r in rows} == {"llama-3.1-8b-instruct"}
    ranked = [r["rank"] for r in rows if r["rank"] is not None]
    assert ranked == sorted(ranked)
    assert all(r["reason"] for r in rows)
    assert all(set(r["signal_scores"]) == {
        "locality", "queue_depth", "kv_cache", "prefix_cache", "latency", "cost"
    } for r in rows)  # fmt: skip


def test_explain_table_shows_candidates_and_reasons() -> None:
    code, out, err = run(
        "explain",
        "-f",
        str(QUICKSTART),
        "--site",
        "east",
        "--model",
        "llama-3.1-8b-instruct",
        "--signals",
        str(SIGNALS),
    )
    assert code == 0, err
    assert "llama-3.1-8b-instruct seen from site east" in out
    assert "vllm-east@east" in out
    assert "first for this model" in out
    header = next(line for line in out.splitlines() if "provider@site" in line)
    cells = [c.strip() for c in header.strip("┃ ").split("┃")]
    assert cells[cells.index("tier") + 1] == "group"
    east = next(line for line in out.splitlines() if "vllm-east@east" in line and "│" in line)
    assert [c.strip() for c in east.strip("│ ").split("│")][cells.index("group")] == "0"
    assert "group 0: the first group for this model" in out
    assert "group 1: freshness not fresh differs from group 0's fresh" in out


def test_explain_of_unknown_model_says_so() -> None:
    code, out, _ = run("explain", "-f", str(QUICKSTART), "--site", "east", "--model", "nope")
    assert code == 0
    assert "no candidates serve model 'nope'" in out


@pytest.mark.parametrize("bad", sorted(p.name for p in BAD.glob("*.yaml")))
def test_invalid_crs_exit_2_with_one_line_per_problem(bad: str) -> None:
    code, out, err = run("render", "-f", str(BAD / bad), "--site", "east", "--gateway", "edge")
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert lines and all(bad in line for line in lines)  # FILE[:LINE]: Kind/name: field: msg
    assert "Traceback" not in err


def test_bad_signals_file_exits_2_naming_the_field(tmp_path: Path) -> None:
    document = json.loads(SIGNALS.read_text())
    document["providers"][0]["signals"]["queue_depth"] = 7
    path = tmp_path / "signals.json"
    path.write_text(json.dumps(document))
    code, out, err = run(*RENDER, "--signals", str(path))
    assert code == 2 and out == ""
    assert "providers[0].signals.queue_depth" in err
    path.write_text("[")
    assert run(*RENDER, "--signals", str(path))[0] == 2
    assert run(*RENDER, "--signals", str(tmp_path / "absent.json"))[0] == 2


def test_unknown_gateway_exits_2() -> None:
    code, _, err = run("render", "-f", str(QUICKSTART), "--site", "east", "--gateway", "nope")
    assert code == 2
    assert "gateway 'nope'" in err


def test_explain_table_shows_excluded_candidates_with_their_reason(tmp_path: Path) -> None:
    document = json.loads(SIGNALS.read_text())
    west = next(p for p in document["providers"] if p["name"] == "vllm-west")
    west["healthy"] = False
    path = tmp_path / "signals.json"
    path.write_text(json.dumps(document))
    code, out, err = run(
        "explain",
        "-f",
        str(QUICKSTART),
        "--site",
        "east",
        "--model",
        "llama-3.1-8b-instruct",
        "--signals",
        str(path),
    )
    assert code == 0, err
    assert "vllm-west@west (unhealthy): excluded (unhealthy)" in out
    code, out, _ = run(*RENDER, "--signals", str(path))
    assert code == 0
    assert "vllm-west" not in {c["cluster"] for c in json.loads(out)["overlay"]["candidates"]}


def test_explain_as_gateway_shows_the_poll_mode_gateways_scores(poll_quickstart: Path) -> None:
    args = ["explain", "-f", str(poll_quickstart), "--site", "east"]
    args += ["--model", "llama-3.1-8b-instruct", "--signals", str(SIGNALS)]
    code, out, err = run(*args, "-o", "json")
    assert code == 0, err
    plain = json.loads(out)
    assert "scored_by" not in plain and not plain["scoring_enabled"]
    assert all(r["score"] is None for r in plain["candidates"])
    code, out, err = run(*args, "--as-gateway", "-o", "json")
    assert code == 0, err
    gateway = json.loads(out)
    assert gateway["scored_by"] == "gateway"
    ranked = [r for r in gateway["candidates"] if r["rank"] is not None]
    assert ranked and all(r["score"] is not None for r in ranked)
    for row in ranked:
        parts = {k: v for k, v in row["score_breakdown"].items() if k != "total"}
        assert row["score_breakdown"]["total"] == row["score"]
        assert sum(parts.values()) == pytest.approx(row["score"]) and len(parts) == 6
    assert ranked[0]["reason"].startswith("first for this model as the poll-mode gateway")
    code, out, err = run(*args, "--as-gateway")
    assert code == 0, err
    assert "scored and ordered as the poll-mode gateway ranks" in out
    assert f"{ranked[0]['score']:.4f}" in out


def test_render_and_explain_cover_the_quickstart_tools_and_agent(tmp_path: Path) -> None:
    code, out, err = run(*RENDER, "--capability", "agentTools")
    assert code == 0, err
    envelope = json.loads(out)
    found = {(c["kind"], c["name"], c["cluster"]) for c in envelope["overlay"]["candidates"]}
    assert found == {("mcp_tool", "search", "tools-east"), ("mcp_tool", "calculator", "tools-east")}
    path = tmp_path / "grid-overlay.json"
    path.write_text(out)
    code, out, _ = run("overlay", "verify", str(path))
    assert code == 0, out
    code, out, err = run(
        "explain", "-f", str(QUICKSTART), "--site", "central", "--capability", "agentToAgent"
    )
    assert code == 0, err
    assert "candidates with agentToAgent seen from site central" in out
    assert "a2a_agent" in out and "planner-west@west" in out
    assert "access_denied" in out
