"""Secret values never leave Grid: not in output, errors, logs or exception text.

Every example is copied to a temporary directory and each Secret in it is given a
distinctive token (in ``stringData`` and, base64-encoded, in ``data``). Then every
render and explain combination runs (each site, gateway and model, JSON and table,
with and without signals), plus deliberately broken manifests whose broken part
sits next to the token. Everything Grid writes is collected and searched.
"""

from __future__ import annotations

import base64
import logging
import traceback
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from grid.adapters.manifests import load_manifests
from grid.cli import main
from grid.core.resources.manifest import ManifestError
from grid.core.routing.explain import explain
from grid.core.routing.render import RenderInputs, render

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TOKEN = "GRIDCANARY-tok-5f0c1e9a7d3b"
FORMS = (TOKEN, base64.b64encode(TOKEN.encode()).decode())


def _poison(text: str) -> str | None:
    """The YAML text with every Secret's values set to the token, or None if unparsable."""
    try:
        documents = list(yaml.safe_load_all(text))
    except yaml.YAMLError:
        return None
    for doc in documents:
        if isinstance(doc, dict) and doc.get("kind") == "Secret":
            keys = set(doc.get("data") or {}) | set(doc.get("stringData") or {}) or {"token"}
            doc["stringData"] = dict.fromkeys(sorted(keys), TOKEN)
            doc["data"] = {k: FORMS[1] for k in sorted(keys)}
    return yaml.safe_dump_all(documents, sort_keys=False)


def _copy_examples(target: Path) -> list[Path]:
    """Poisoned copies of every example directory; returns the directories."""
    directories = []
    for source in sorted(p for p in EXAMPLES.iterdir() if p.is_dir()):
        copy = target / source.name
        copy.mkdir()
        for file in sorted(source.iterdir()):
            text = file.read_text()
            poisoned = _poison(text) if file.suffix in (".yaml", ".yml") else None
            (copy / file.name).write_text(poisoned if poisoned is not None else text)
        directories.append(copy)
    return directories


BROKEN = {
    "broken-yaml-next-to-token.yaml": (
        f"apiVersion: v1\nkind: Secret\nmetadata: {{name: s, namespace: grid-system}}\n"
        f"stringData:\n  token: {TOKEN}\n  other: [unclosed {TOKEN}\n"
    ),
    "token-in-bad-base64.yaml": (
        "apiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: grid-system}\n"
        f"data:\n  token: '{TOKEN}!!'\n"
    ),
    "token-as-wrong-type.yaml": (
        "apiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: grid-system}\n"
        f"stringData:\n  token: [{TOKEN}]\n"
    ),
    "token-in-bad-key.yaml": (
        "apiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: grid-system}\n"
        f"stringData:\n  '{TOKEN} x': v\n"
    ),
}


def _names(directory: Path) -> dict[str, set[Any]]:
    """Sites, (gateway, namespace) pairs and models declared in a directory."""
    found: dict[str, set[Any]] = {"sites": set(), "gateways": set(), "models": set()}
    for file in directory.glob("*.yaml"):
        try:
            documents = list(yaml.safe_load_all(file.read_text()))
        except yaml.YAMLError:
            continue
        for doc in documents:
            if not isinstance(doc, dict):
                continue
            spec = doc.get("spec") or {}
            if doc.get("kind") == "GridSite":
                found["sites"].add(doc["metadata"]["name"])
            elif doc.get("kind") == "GridNetwork":
                for ref in spec.get("gatewayRefs") or []:
                    found["gateways"].add((ref["name"], ref.get("namespace")))
                    if ref.get("localSiteName"):
                        found["sites"].add(ref["localSiteName"])
            elif doc.get("kind") == "InferenceProvider":
                found["models"].update(m["name"] for m in spec.get("models") or [])
    return found


def _invocations(directory: Path) -> Iterator[list[str]]:
    names = _names(directory)
    signals = [[], ["--signals", str(directory / "signals.json")]]
    if not (directory / "signals.json").exists():
        signals = [[]]
    sites = sorted(names["sites"]) or ["east"]
    for site in sites:
        for extra in signals:
            for gateway, namespace in sorted(names["gateways"], key=str) or [("edge", None)]:
                ns = ["--namespace", namespace] if namespace else []
                yield ["render", "-f", str(directory), "--site", site, "--gateway", gateway, *ns]
                yield [*["render", "-f", str(directory), "--site", site], "--gateway", gateway]
            for model in sorted(names["models"]) or ["m"]:
                for output in ("json", "table"):
                    base = ["explain", "-f", str(directory), "--site", site, "--model", model]
                    yield [*base, "-o", output, *extra]
    for file in sorted(directory.glob("*.yaml")):
        yield ["render", "-f", str(file), "--site", sites[0], "--gateway", "edge"]
        yield ["explain", "-f", str(file), "--site", sites[0], "--model", "m", "-o", "json"]


def _assert_clean(text: str, what: str) -> None:
    for form in FORMS:
        assert form not in text, f"secret token leaked in {what}"


def test_no_secret_value_reaches_any_output(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    directories = _copy_examples(tmp_path)
    assert any((d / "signals.json").exists() for d in directories), "quickstart is present"
    poisoned = [d for d in directories if any(TOKEN in f.read_text() for f in d.glob("*.yaml"))]
    assert poisoned, "at least one example holds a Secret to poison"
    broken = tmp_path / "broken"
    broken.mkdir()
    for name, text in BROKEN.items():
        (broken / name).write_text(text)
    runner = CliRunner()
    outcomes: dict[int, int] = {}
    for directory in [*directories, broken]:
        for args in _invocations(directory):
            result = runner.invoke(main, args)
            outcomes[result.exit_code] = outcomes.get(result.exit_code, 0) + 1
            _assert_clean(result.stdout, f"stdout of {args}")
            _assert_clean(result.stderr, f"stderr of {args}")
            if result.exception is not None and not isinstance(result.exception, SystemExit):
                pytest.fail(f"unexpected exception for {args}: {type(result.exception).__name__}")
            if result.exc_info is not None:
                _assert_clean("".join(traceback.format_exception(*result.exc_info)), "traceback")
    assert outcomes.get(0, 0) > 0 and outcomes.get(2, 0) > 0, outcomes
    for record in caplog.records:
        _assert_clean(record.getMessage(), "a log record")
        _assert_clean(repr(record.args), "log record arguments")
    _assert_clean(caplog.text, "captured logs")


def test_no_secret_value_in_core_exception_text(tmp_path: Path) -> None:
    for name, text in BROKEN.items():
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(ManifestError) as info:
            load_manifests(path)
        exc = info.value
        _assert_clean(str(exc), f"str of the error for {name}")
        _assert_clean(repr(exc), f"repr of the error for {name}")
        _assert_clean("".join(traceback.format_exception(exc)), f"traceback for {name}")
        for problem in exc.problems:
            _assert_clean(repr(problem), f"a problem of {name}")


def test_loaded_secret_never_reveals_values_through_render_results(tmp_path: Path) -> None:
    directory = next(d for d in _copy_examples(tmp_path) if (d / "signals.json").exists())
    manifests = load_manifests(directory)
    assert manifests.secrets, "the quickstart declares a Secret"
    # The token really is loaded, so a leak would be possible and would be seen.
    assert all(TOKEN in s.string_data.values() for s in manifests.secrets.values())
    inputs = RenderInputs(
        networks=tuple(manifests.networks.values()),
        sites=tuple(manifests.sites.values()),
        providers=tuple(manifests.providers.values()),
        secrets=tuple(manifests.secrets.values()),
    )
    _assert_clean(repr(inputs), "repr of the render inputs")
    for secret in inputs.secrets:
        _assert_clean(repr(secret) + str(secret), "repr/str of a Secret")
    network = inputs.networks[0]
    for ref in network.spec.gateway_refs:
        rendered = render(inputs, site="east", gateway=ref.name, now=datetime.now(UTC))
        _assert_clean(repr(rendered), "repr of a render result")
    for provider in inputs.providers:
        for model in provider.spec.models:
            _assert_clean(repr(explain(inputs, site="east", model=model.name)), "an explanation")
