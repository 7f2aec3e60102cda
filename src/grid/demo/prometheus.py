"""A real Prometheus over a running demo: ``grid demo --prometheus`` and the alert tests.

`scrape_config` turns a demo description (demo.json) into a ``prometheus.yml``:
one job for the operators' metrics listeners (``grid-operator``), one for the
gateways' admin ports (``grid-gateway``), and Grid's rule files.
`LocalPrometheus` runs Debian's ``prometheus`` binary on it, bound to loopback
on a free port, with its data under the demo's directory, and waits until it
answers ``/-/ready``.

The rules are the shipped ``deploy/prometheus/grid-rules.yaml`` of this
checkout (`shipped_rules`): the demo runs from a checkout, where ``make run``
starts it.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from grid.demo.ports import free_port
from grid.errors import GridError

RULES_PATH = Path("deploy") / "prometheus" / "grid-rules.yaml"
"""Grid's alert and recording rules, relative to the repository root."""
OPERATOR_JOB = "grid-operator"
GATEWAY_JOB = "grid-gateway"
READY_TIMEOUT_S = 30.0
"""How long Prometheus may take to open its TSDB and load the rules (seconds)."""
STOP_TIMEOUT_S = 10.0
"""How long a SIGTERMed Prometheus may take to close its TSDB before it is killed."""


class PrometheusUnavailable(GridError):
    """The ``prometheus`` binary or Grid's rule file is not where the demo looks."""

    code = "prometheus_unavailable"


def shipped_rules() -> Path:
    """``deploy/prometheus/grid-rules.yaml`` of the checkout this package runs from."""
    for parent in Path(__file__).resolve().parents:
        candidate = parent / RULES_PATH
        if candidate.is_file():
            return candidate
    raise PrometheusUnavailable(f"{RULES_PATH} not found: run the demo from a Grid checkout")


def scrape_config(
    description: dict[str, Any], rule_files: Sequence[Path], interval_s: float
) -> dict[str, Any]:
    """``prometheus.yml`` for a demo: every operator and gateway, scraped each interval."""
    sites = description["sites"]
    operators = [s["metrics"] for s in sites.values() if s.get("metrics")]
    gateways = [s["gateway_admin"] for s in sites.values() if s.get("gateway_admin")]
    interval = f"{max(1, round(interval_s * 1000))}ms"
    jobs: list[dict[str, Any]] = [
        {"job_name": OPERATOR_JOB, "static_configs": [{"targets": operators}]},
        {"job_name": GATEWAY_JOB, "static_configs": [{"targets": gateways}]},
    ]
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [str(p) for p in rule_files],
        "scrape_configs": [j for j in jobs if j["static_configs"][0]["targets"]],
    }


class LocalPrometheus:
    """One ``prometheus`` process on 127.0.0.1, its config and data under ``root``."""

    def __init__(self, root: Path, binary: str = "prometheus") -> None:
        self.root = root
        self.binary = binary
        self.url: str | None = None
        self._process: asyncio.subprocess.Process | None = None

    async def start(self, config: dict[str, Any]) -> str:
        """Write ``config``, start Prometheus on it, and return its URL once ready."""
        executable = shutil.which(self.binary)
        if executable is None:
            raise PrometheusUnavailable(
                f"{self.binary} not found (Debian's prometheus package: make system-deps)"
            )
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / "prometheus.yml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        address = f"127.0.0.1:{free_port()}"
        log = open(self.root / "prometheus.log", "ab")  # noqa: SIM115 (the child keeps it)
        with log:
            self._process = await asyncio.create_subprocess_exec(
                executable,
                f"--config.file={path}",
                f"--storage.tsdb.path={self.root / 'data'}",
                f"--web.listen-address={address}",
                "--log.level=warn",
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        self.url = f"http://{address}"
        await self._wait_ready()
        return self.url

    async def _wait_ready(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + READY_TIMEOUT_S
        async with aiohttp.ClientSession() as http:
            while True:
                assert self._process is not None
                if self._process.returncode is not None:
                    raise PrometheusUnavailable(
                        f"prometheus exited {self._process.returncode}; see "
                        f"{self.root / 'prometheus.log'}"
                    )
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    timeout = aiohttp.ClientTimeout(total=1)
                    async with http.get(f"{self.url}/-/ready", timeout=timeout) as r:
                        if r.status == 200:
                            return
                if loop.time() > deadline:
                    raise PrometheusUnavailable("prometheus did not become ready")
                await asyncio.sleep(0.2)

    async def stop(self) -> None:
        """SIGTERM Prometheus and wait; SIGKILL it past the grace period."""
        process, self._process = self._process, None
        if process is None or process.returncode is not None:
            return
        process.terminate()
        try:
            async with asyncio.timeout(STOP_TIMEOUT_S):
                await process.wait()
        except TimeoutError:
            process.kill()
            await process.wait()
