"""Fixtures for the live view's browser tests: one demo and one headless Chromium per module.

`demo` runs ``grid demo`` as a person does (a child process with ``--duration``)
and yields its demo.json once every site's view lists all three sites alive.
`browser` is Debian's chromium driven by its chromedriver (``make test``
installs both), headless, with a fresh profile and no network features of its
own, logging the page's console so tests can assert it stays clean.
`fixed_view` serves one given view through the very `LiveViewRoutes` the
operator mounts, on a loopback listener in a background thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from grid.adapters.health_server import METRICS_POLICY
from grid.adapters.http_listener import HttpListener
from grid.adapters.live_view import ChangeSignal, LiveViewRoutes
from grid.testing.poll import eventually_blocking

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
DEMO_DURATION_S = 400
"""Long enough for every test of the module; the fixture stops the demo sooner."""
START_TIMEOUT_S = 90.0
GRID_DEMO = (sys.executable, "-m", "grid", "demo")

pytestmark = pytest.mark.e2e


def _wait(check: Callable[[], Any], what: str, timeout_s: float, interval_s: float = 0.1) -> Any:
    """Poll ``check`` until truthy (a deadline, never a fixed sleep); its value."""
    return eventually_blocking(check, what, timeout_s=timeout_s, interval_s=interval_s)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A running ``grid demo``; its demo.json document (plus ``root``)."""
    root = tmp_path_factory.mktemp("ui") / "demo"
    log = open(root.parent / "demo.out", "wb")  # noqa: SIM115 - closed at teardown
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "grid",
            "demo",
            "--duration",
            str(DEMO_DURATION_S),
            "--dir",
            str(root),
            "--traffic",
            "4",
        ],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    try:

        def described() -> dict[str, Any] | None:
            assert proc.poll() is None, f"grid demo exited with {proc.returncode}"
            path = root / "demo.json"
            if not path.exists():
                return None
            doc: dict[str, Any] = json.loads(path.read_text())
            return doc if doc.get("ui") else None

        doc = _wait(described, "demo.json with ui", START_TIMEOUT_S)
        doc["root"] = root
        yield doc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Headless Chromium under selenium, with a fresh profile."""
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.skip("chromium and chromium-driver are not installed (make test installs them)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tmp_path_factory.mktemp("chromium-profile")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1400,1800",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@contextlib.contextmanager
def fixed_view(view: dict[str, Any]) -> Iterator[str]:
    """Serve ``view`` at ``/ui/`` on 127.0.0.1 from a background thread; the page URL."""
    loop = asyncio.new_event_loop()
    started: dict[str, Any] = {}
    ready = threading.Event()

    async def serve() -> None:
        app = web.Application()
        LiveViewRoutes(lambda: view, ChangeSignal()).add_to(app)
        listener = HttpListener(app, METRICS_POLICY)
        host, port = await listener.start("127.0.0.1", 0)
        started.update(listener=listener, url=f"http://{host}:{port}/ui/")
        ready.set()

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(serve(), loop).result(timeout=10)
    ready.wait(10)
    try:
        yield started["url"]
    finally:
        asyncio.run_coroutine_threadsafe(started["listener"].stop(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


@pytest.fixture
def serve_view() -> Callable[[dict[str, Any]], contextlib.AbstractContextManager[str]]:
    """`fixed_view` as a fixture."""
    return fixed_view
