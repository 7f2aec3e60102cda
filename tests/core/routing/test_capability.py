"""Capabilities: restricting render and explain, carrying them in records, site offers."""

from __future__ import annotations

from typing import Any

from grid.core.crdt.record import ModelInfo, ProviderRecord, RecordSignals
from grid.core.resources import InferenceProvider
from grid.core.resources.site_offers import site_capabilities
from grid.core.routing.explain import explain
from grid.core.routing.mesh_view import record_for, remote_provider

from .test_render import build, do_render, provider, world


def capable_world() -> dict[str, Any]:
    w = world()
    w["providers"][0]["spec"]["models"] = [
        {"name": "llama", "capabilities": ["chat", "tools"], "contextWindow": 8192},
        {"name": "embed", "capabilities": ["embeddings"]},
    ]
    w["providers"].append(provider("vllm-extra", "local", ["qwen"]))
    w["providers"][-1]["spec"]["models"] = [{"name": "qwen", "capabilities": ["chat"]}]
    return w


def names(rendered: Any) -> set[tuple[str, str]]:
    return {(c["cluster"], c["name"]) for c in rendered.overlay["candidates"]}


def test_render_keeps_only_models_declaring_the_capability() -> None:
    everything = names(do_render(capable_world()))
    chat = names(do_render(capable_world(), capability="chat"))
    assert chat == {("vllm-east", "llama"), ("vllm-extra", "qwen")}
    assert chat < everything
    assert names(do_render(capable_world(), capability="embeddings")) == {("vllm-east", "embed")}
    assert names(do_render(capable_world(), capability="vision")) == set()


def test_restricting_changes_nothing_else_about_the_kept_candidates() -> None:
    full = {(c["cluster"], c["name"]): c for c in do_render(capable_world()).overlay["candidates"]}
    kept = do_render(capable_world(), capability="embeddings").overlay["candidates"]
    for candidate in kept:
        same = full[candidate["cluster"], candidate["name"]]
        assert candidate["score"] == same["score"] and candidate["stable_id"] == same["stable_id"]


def test_explain_by_capability_alone_covers_every_model_declaring_it() -> None:
    inputs, signals = build(capable_world())
    result = explain(inputs, site="east", capability="chat", signals=signals)
    assert {(r.provider, r.model) for r in result.rows} == {
        ("vllm-east", "llama"),
        ("vllm-extra", "qwen"),
    }
    assert result.as_dict()["capability"] == "chat"
    narrowed = explain(inputs, site="east", model="qwen", capability="chat", signals=signals)
    assert [(r.provider, r.model) for r in narrowed.rows] == [("vllm-extra", "qwen")]


def test_a_record_carries_capabilities_and_context_window_to_the_remote_provider() -> None:
    own = InferenceProvider.model_validate(capable_world()["providers"][0])
    record = record_for(own, "east", signals=RecordSignals(), healthy=True, observed_at_s=1.0)
    assert record.info("llama") == ModelInfo("llama", ("chat", "tools"), 8192)
    remote = remote_provider(record, "grid")
    models = {m.name: m for m in remote.spec.models}
    assert models["llama"].capabilities == ["chat", "tools"]
    assert models["llama"].context_window == 8192
    assert models["embed"].capabilities == ["embeddings"]


def test_site_offers_merge_providers_of_a_model() -> None:
    a = ProviderRecord(
        "a",
        "a",
        "east",
        "local",
        models=("llama",),
        model_info=(ModelInfo("llama", ("chat",), 4096),),
    )
    b = ProviderRecord(
        "b",
        "b",
        "east",
        "local",
        models=("llama", "phi"),
        model_info=(ModelInfo("llama", ("tools",), 8192),),
    )
    assert site_capabilities([b, a]) == [
        {
            "model": "llama",
            "capabilities": ["chat", "tools"],
            "providers": ["a", "b"],
            "contextWindow": 8192,
        },
        {"model": "phi", "capabilities": [], "providers": ["b"]},
    ]
