"""The live view in a real browser: headless Chromium against a running ``grid demo``.

One demo and one browser serve every test of the module (module-scoped
fixtures). The tests read the page as a person would, from its DOM: the
membership table lists every site alive; a killed operator turns suspect, then
dead in the other sites' columns within the SWIM bound, and alive again after
the demo's supervisor restarts it; each scoring bar carries exactly the numbers
``grid explain`` prints for the same model; a 64-member mesh renders; the
console stays free of errors; and a screenshot lands under ``.grid/demo/``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.client
import json
import os
import signal
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from grid.cli import main
from grid.cli.routing_cmd import _inputs, _signals
from grid.core.live.view import SiteInputs, explain_all, site_view
from grid.core.swim.config import SwimConfig
from grid.core.vocabulary import SIGNAL_NAMES
from grid.demo.mesh import DEMO_TOKEN
from grid.testing.live_view import detection_bound_s, simulated_view
from grid.testing.simulator import Simulator

from .conftest import _wait

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[3]
QUICKSTART = ROOT / "examples" / "quickstart"
SCREENSHOT = ROOT / ".grid" / "demo" / "live-view.png"
SITES = ("central", "east", "west")
DEMO_SWIM = SwimConfig.from_spec(gossip_nodes=3, probe_interval_s=0.5, suspicion_timeout_s=2.0)
"""The demo's SWIM settings (probeInterval 500ms, suspicionTimeout 2s)."""
AT = "2026-01-01T00:00:00.000Z"
RESTART_S = 60.0
"""The supervisor's backoff plus an operator's start and rejoin, on a loaded machine."""


def _states(driver: Any, member: str) -> dict[str, str]:
    """Observer → the state the page shows for ``member`` in that observer's column."""
    found: dict[str, str] = driver.execute_script(
        """
        const cells = document.querySelectorAll(
          `tr[data-member="${arguments[0]}"] td[data-observer]`);
        return Object.fromEntries([...cells].map((c) => [c.dataset.observer, c.dataset.state]));
        """,
        member,
    )
    return found


def _text(driver: Any, selector: str) -> str:
    """The text of every element matching ``selector``, read in one go."""
    text: str = driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map((e) => e.innerText).join('\\n')",
        selector,
    )
    return text


def _console_errors(driver: Any) -> list[dict[str, Any]]:
    """Errors and warnings the console logged since the last call (reading clears it)."""
    return [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]


def _leave(driver: Any) -> None:
    """Close the page (and its event stream) while its server still runs; no console errors."""
    driver.get("about:blank")
    assert _console_errors(driver) == []


def _open(driver: Any, url: str) -> None:
    driver.get(url)
    _wait(lambda: driver.execute_script("return !!window.gridView"), "page rendered", 20)


def test_page_lists_every_site_alive(demo: dict[str, Any], browser: Any) -> None:
    _open(browser, demo["ui"])

    def all_alive() -> bool:
        return all(_states(browser, site) == dict.fromkeys(SITES, "alive") for site in SITES)

    _wait(all_alive, "every site alive in every column", 60)
    assert browser.title == "Grid live view"
    origins = browser.execute_script(
        "return [...document.querySelectorAll('#lanes tr[data-origin]')]"
        ".map((r) => r.dataset.origin)"
    )
    assert set(origins) == set(SITES)


def test_bars_equal_the_page_snapshot_live(demo: dict[str, Any], browser: Any) -> None:
    """Against the live demo: each bar's segments are the snapshot's contributions."""
    _open(browser, demo["ui"])
    _wait(
        lambda: browser.find_elements("css selector", "#ranking .candidate svg rect[data-signal]"),
        "a scored candidate on the page",
        60,
    )
    # Read the DOM and the view it was rendered from in one script: no update in between.
    shown, view = browser.execute_script(
        """
        const rows = [...document.querySelectorAll('#ranking .candidate')].map((row) => ({
          model: row.dataset.model, provider: row.dataset.provider, site: row.dataset.site,
          segments: Object.fromEntries([...row.querySelectorAll('rect[data-signal]')]
            .map((r) => [r.dataset.signal, Number(r.dataset.value)]))}));
        const tab = document.querySelector('#observer-tabs button[aria-pressed="true"]');
        return [rows, {observer: tab.dataset.observer, ranking: window.gridView.ranking}];
        """
    )
    expected = {
        (m["model"], c["provider"], c["site"]): c["contributions"]
        for m in view["ranking"][view["observer"]]
        for c in m["candidates"]
    }
    assert shown and len(shown) == len(expected)
    for row in shown:
        assert row["segments"] == expected[(row["model"], row["provider"], row["site"])]


def _cli_explain(site: str, model: str) -> dict[str, Any]:
    args = ["explain", "-f", str(QUICKSTART), "--site", site, "--model", model]
    args += ["--signals", str(QUICKSTART / "signals.json"), "-o", "json"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_each_bar_shows_grid_explain_numbers(
    browser: Any, serve_view: Callable[[dict[str, Any]], Any]
) -> None:
    """The quickstart's view, ranked from the files ``grid explain`` reads, in the page."""
    inputs = _inputs(str(QUICKSTART))
    signals = _signals(str(QUICKSTART / "signals.json"))
    budget = {"tenantId": "acme", "spendUsd": 2.5, "capUsd": 10.0, "spendRatio": 0.25}
    explanations = explain_all(inputs, "east", signals)
    view = site_view(SiteInputs("east", AT, 0, explanations=explanations, budgets=[budget]))
    compared = 0
    with serve_view(view) as url:
        _open(browser, url)
        for model in view["ranking"]["east"]:
            explained = _cli_explain("east", model["model"])["candidates"]
            for candidate in explained:
                breakdown = candidate["score_breakdown"]
                selector = (
                    f'.candidate[data-model="{model["model"]}"]'
                    f'[data-provider="{candidate["provider"]}"][data-site="{candidate["site"]}"]'
                )
                (row,) = browser.find_elements("css selector", selector)
                reason = row.find_element("css selector", ".reason").text
                assert reason == candidate["reason"]
                segments = {
                    r.get_attribute("data-signal"): float(r.get_attribute("data-value"))
                    for r in row.find_elements("css selector", "rect[data-signal]")
                }
                texts = {
                    s.get_attribute("data-signal"): s.text
                    for s in row.find_elements("css selector", ".contribution")
                }
                if breakdown is None:
                    assert segments == {}
                    continue
                assert segments == {n: breakdown[n] for n in SIGNAL_NAMES}
                assert texts == {n: f"{n} {breakdown[n]:.4f}" for n in SIGNAL_NAMES}
                compared += 1
        budgets = _text(browser, "#budgets tbody tr")
        assert budgets.split() == ["east", "acme", "2.5", "10", "0.2500"]
        _leave(browser)
    assert compared > 0


def test_the_scoring_panel_shows_groups_and_selection_shares(
    browser: Any, serve_view: Callable[[dict[str, Any]], Any]
) -> None:
    """Each model's candidates stand under their group headings, each with its share."""
    inputs = _inputs(str(QUICKSTART))
    signals = _signals(str(QUICKSTART / "signals.json"))
    selections = {("vllm-east", 0): 30, ("bedrock-llama", 1): 10}
    explanations = explain_all(inputs, "east", signals)
    view = site_view(SiteInputs("east", AT, 0, explanations=explanations, selections=selections))
    (llama,) = [m for m in view["ranking"]["east"] if m["model"] == "llama-3.1-8b-instruct"]
    with serve_view(view) as url:
        _open(browser, url)
        shown = browser.execute_script(
            """
            const model = document.querySelector(`.model[data-model="${arguments[0]}"]`);
            return {
              total: model.querySelector('.selections').dataset.selections,
              items: [...model.querySelectorAll('.group, .candidate')].map((e) =>
                e.classList.contains('group')
                  ? {group: e.dataset.group, text: e.innerText}
                  : {cluster: e.dataset.cluster, group: e.dataset.group, share: e.dataset.share,
                     text: (e.querySelector('.share') || {}).innerText || null})};
            """,
            llama["model"],
        )
        _leave(browser)
    assert shown["total"] == "40"
    expected: list[dict[str, Any]] = []
    last = None
    for c in llama["candidates"]:
        group = None if c["rank"] is None else c["group"]
        if group is not None and group != last:
            expected.append({"group": str(group)})
        last = group
        expected.append({"cluster": c["cluster"], "share": c["share"]})
    got = [
        {"group": i["group"]}
        if "cluster" not in i
        else {"cluster": i["cluster"], "share": None if i["share"] == "" else float(i["share"])}
        for i in shown["items"]
    ]
    assert got == expected
    by_cluster = {i["cluster"]: i for i in shown["items"] if "cluster" in i}
    assert by_cluster["vllm-east"]["text"] == "75% of selections"
    assert by_cluster["bedrock-llama"]["text"] == "25% of selections"
    assert by_cluster["vllm-west"]["text"] == "0% of selections"
    headings = [i["text"] for i in shown["items"] if "cluster" not in i]
    assert headings[0].startswith("group 0") and "the first group for this model" in headings[0]


def test_the_live_demo_counts_its_gateways_selections(demo: dict[str, Any], browser: Any) -> None:
    """The demo's traffic: east's page shows selections of its gateway, shares summing to 1."""
    _open(browser, demo["ui"])

    def counted() -> Any:
        found = browser.execute_script(
            """
            // Before the first ranking arrives the page has no tab and no model yet.
            const tab = document.querySelector('#observer-tabs button[aria-pressed="true"]');
            if (!tab) return null;
            const models = window.gridView.ranking[tab.dataset.observer] || [];
            return models.filter((m) => m.selections > 0).map((m) => ({
              model: m.model, total: m.selections,
              dom: Number(document.querySelector(`.model[data-model="${m.model}"] .selections`)
                .dataset.selections),
              shares: m.candidates.filter((c) => c.share !== null).map((c) => c.share)}));
            """
        )
        return found or None

    models = _wait(counted, "a model with selections in the last minute", 60)
    for model in models:
        assert model["dom"] == model["total"]
        assert abs(sum(model["shares"]) - 1.0) < 1e-9
    _leave(browser)


def test_a_poll_mode_page_shows_the_gateways_bars_and_says_so(
    browser: Any, serve_view: Callable[[dict[str, Any]], Any], poll_quickstart: Path
) -> None:
    """Under poll each model notes whose scores it shows; bars are ``--as-gateway``'s."""
    inputs = _inputs(str(poll_quickstart))
    signals = _signals(str(QUICKSTART / "signals.json"))
    view = site_view(
        SiteInputs(
            "east", AT, 0, explanations=explain_all(inputs, "east", signals, as_gateway=True)
        )
    )
    compared = 0
    with serve_view(view) as url:
        _open(browser, url)
        for model in view["ranking"]["east"]:
            name = model["model"]
            # Read in one script: the page re-renders on every event, so an element
            # found by one call may be gone by the next.
            notes = browser.execute_script(
                "return [...document.querySelectorAll(arguments[0])].map((n) => n.innerText);",
                f'.model[data-model="{name}"] .scored-by[data-scored-by="gateway"]',
            )
            assert notes == [
                "scored as the poll-mode gateway ranks: its order and its scores from the pulled"
                " signals"
            ]
            args = ["explain", "-f", str(poll_quickstart), "--site", "east", "--model", name]
            args += ["--signals", str(QUICKSTART / "signals.json"), "--as-gateway", "-o", "json"]
            result = CliRunner().invoke(main, args)
            assert result.exit_code == 0, result.output
            shown = browser.execute_script(
                """
                return [...document.querySelectorAll(`.candidate[data-model="${arguments[0]}"]`)]
                  .map((row) => ({provider: row.dataset.provider, site: row.dataset.site,
                    reason: row.querySelector('.reason').textContent,
                    segments: Object.fromEntries([...row.querySelectorAll('rect[data-signal]')]
                      .map((r) => [r.dataset.signal, Number(r.dataset.value)]))}));
                """,
                name,
            )
            explained = json.loads(result.output)["candidates"]
            for row, candidate in zip(shown, explained, strict=True):
                assert (row["provider"], row["site"]) == (candidate["provider"], candidate["site"])
                assert row["reason"] == candidate["reason"]
                breakdown = candidate["score_breakdown"]
                if candidate["rank"] is None:
                    continue
                assert row["segments"] == {n: breakdown[n] for n in SIGNAL_NAMES}
                compared += 1
        _leave(browser)
    assert compared > 0


def test_page_renders_a_64_member_mesh(
    browser: Any, serve_view: Callable[[dict[str, Any]], Any]
) -> None:
    sim = Simulator(64)
    nodes = [sim.add_node() for _ in range(64)]
    sim.bootstrap(nodes)
    assert sim.run_until(sim.full_membership, timeout_s=30, check_every_s=0.5) is not None
    sim.kill(nodes[5])
    victim = nodes[5].id
    sim.run_until(
        lambda: all(
            n.state_of(victim) and n.state_of(victim).value == "dead" for n in sim.running()
        ),
        timeout_s=detection_bound_s(sim.config, 64),
        check_every_s=0.2,
    )
    with serve_view(simulated_view(sim)) as url:
        _open(browser, url)
        rows = browser.find_elements("css selector", "#members tr[data-member]")
        assert len(rows) == 64
        cells = browser.find_elements("css selector", "#members td[data-observer]")
        assert len(cells) == 64 * 63
        assert set(_states(browser, victim).values()) == {"dead"}
        assert "not answering: " + victim in browser.find_element("id", "unreachable").text
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)  # a clean clone has no .grid yet
        assert browser.save_screenshot(str(SCREENSHOT.with_name("live-view-64.png")))
        _leave(browser)


def test_killed_site_turns_suspect_then_dead_then_alive(demo: dict[str, Any], browser: Any) -> None:
    _open(browser, demo["ui"])
    _wait(lambda: _states(browser, "east") == dict.fromkeys(SITES, "alive"), "east alive", 60)
    pid = demo["sites"]["east"]["pid"]
    others = [s for s in SITES if s != "east"]
    seen: list[tuple[float, dict[str, str]]] = []
    killed_at = time.monotonic()
    # Frozen first, killed once the mesh declared it dead: a SIGKILL alone lets the
    # supervisor restart east (about a second) before the suspicion runs out, and it
    # would refute instead. To its peers a stopped process is a crashed one.
    os.kill(pid, signal.SIGSTOP)

    def record() -> dict[str, str]:
        states = _states(browser, "east")
        if not seen or seen[-1][1] != states:
            seen.append((time.monotonic() - killed_at, states))
        return states

    bound = detection_bound_s(DEMO_SWIM, len(SITES)) + 2.0  # + the aggregate's poll and SSE
    _wait(
        lambda: all(record().get(s) == "dead" for s in others),
        "east dead in the other sites' columns",
        bound,
        interval_s=0.05,
    )
    os.kill(pid, signal.SIGKILL)
    suspected = [t for t, states in seen if "suspect" in states.values()]
    assert suspected, f"east never shown suspect before dead: {seen}"
    activity = _text(browser, "#activity")
    assert "east suspect" in activity and "east dead" in activity

    def restarted() -> bool:
        doc = json.loads((demo["root"] / "demo.json").read_text())
        return doc["sites"]["east"]["pid"] != pid

    _wait(restarted, "the supervisor restarted east", RESTART_S)
    _wait(
        lambda: record() == dict.fromkeys(SITES, "alive"),
        "east alive again in every column",
        RESTART_S,
    )


def _read_events(url: str, count: int) -> bytes:
    """The first ``count`` events of a live view stream, raw."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        conn.request("GET", parts.path)
        response = conn.getresponse()
        assert response.status == 200
        raw = b""
        while raw.count(b"\n\ndata: ") < count:
            line = response.readline()
            assert line, "stream ended"
            raw += line
        return raw
    finally:
        conn.close()


def test_no_response_or_event_carries_a_credential(demo: dict[str, Any]) -> None:
    """Every live view answer, per site and aggregated, scanned for the demo's secrets."""
    secrets = [DEMO_TOKEN, b"PRIVATE KEY"]
    secrets += [Path(site["key"]).read_bytes().strip() for site in demo["sites"].values()]
    bases = [demo["ui"]] + [f"http://{s['metrics']}/ui/" for s in demo["sites"].values()]
    scanned = 0
    for base in bases:
        for path in ("", "live.js", "live.css", "state.json"):
            with urllib.request.urlopen(base + path, timeout=10) as response:
                body = response.read()
                headers = str(response.headers).encode()
            for secret in secrets:
                assert secret not in body and secret not in headers, base + path
            scanned += 1
        events = _read_events(base + "events", 6)
        assert b'"type":"ranking"' in events
        for secret in secrets:
            assert secret not in events, base + "events"
        scanned += 1
    assert scanned == 5 * len(bases)


def test_screenshot_and_clean_console(demo: dict[str, Any], browser: Any) -> None:
    _open(browser, demo["ui"])
    _wait(
        lambda: all(_states(browser, s) == dict.fromkeys(SITES, "alive") for s in SITES),
        "every site alive",
        60,
    )
    _wait(
        lambda: browser.find_elements("css selector", "#traffic .traffic-row"),
        "traffic counted",
        30,
    )
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        SCREENSHOT.unlink()
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(SCREENSHOT))
    assert SCREENSHOT.stat().st_size > 10_000
    assert _console_errors(browser) == []


def test_tools_and_agents_stand_beside_the_models_under_their_kind(
    browser: Any, serve_view: Callable[[dict[str, Any]], Any]
) -> None:
    """Each kind under its own heading, models first; every entry tagged with its kind."""
    inputs = _inputs(str(QUICKSTART))
    explained = explain_all(inputs, "east", _signals(str(QUICKSTART / "signals.json")))
    model = next(e for e in explained if e.rows and e.rows[0].kind == "inference_model")
    rows = tuple(dataclasses.replace(r, kind="a2a_agent", model="planner") for r in model.rows)
    agent = dataclasses.replace(model, model="planner", rows=rows)
    view = site_view(SiteInputs("east", AT, 0, explanations=[agent, *explained]))
    with serve_view(view) as url:
        _open(browser, url)
        _wait(lambda: browser.find_elements("css selector", "#ranking .model"), "the ranking", 30)
        shown = browser.execute_script(
            """
            return [...document.querySelectorAll('#ranking > *')].map((n) =>
              n.classList.contains('kind') ? ['heading', n.dataset.kind, n.textContent]
                : ['entry', n.dataset.kind, n.dataset.model,
                   n.querySelector('.kind-tag').textContent]);
            """
        )
        _leave(browser)
    headings = [s[1:] for s in shown if s[0] == "heading"]
    kinds = [m["kind"] for m in view["ranking"]["east"]]
    assert [h[0] for h in headings] == list(dict.fromkeys(kinds))
    assert headings[0][1] == "Models" and headings[-1] == ["a2a_agent", "Agents (A2A)"]
    entries = [s[1:3] for s in shown if s[0] == "entry"]
    assert entries == [[m["kind"], m["model"]] for m in view["ranking"]["east"]]
    tags = {s[1]: s[3] for s in shown if s[0] == "entry"}
    assert tags["a2a_agent"] == "A2A agent" and tags["inference_model"] == "model"
