"""`grid mock-provider` as a real process: it prints its address and serves."""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.request

LAUNCH = "from grid.cli.mock_provider_cmd import mock_provider; mock_provider()"


def test_the_command_serves_until_terminated() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", LAUNCH, "--port", "0", "--model", "m1", "--profile", "bursty"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        found = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        assert found, line
        base = f"http://127.0.0.1:{found.group(1)}"
        with urllib.request.urlopen(f"{base}/health", timeout=5) as resp:
            assert resp.status == 200
        with urllib.request.urlopen(f"{base}/metrics", timeout=5) as resp:
            assert b"vllm:num_requests_waiting" in resp.read()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == 0


def test_a_malformed_degrade_is_a_usage_error_naming_the_flag() -> None:
    from click.testing import CliRunner

    from grid.cli.mock_provider_cmd import mock_provider

    for bad in ("3", "x:1", "0:5", "3:-1"):
        result = CliRunner().invoke(
            mock_provider, ["--port", "0", "--model", "m", "--degrade", bad]
        )
        assert result.exit_code == 2, (bad, result.output)
        assert "--degrade" in result.output
        assert "Traceback" not in result.output
