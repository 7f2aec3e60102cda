"""GridStateSnapshot: lanes, revisions, local writes and same-origin merges."""

from __future__ import annotations

import pytest

from grid.core.crdt import (
    CertLaneValue,
    CounterRefusal,
    GatewayLaneValue,
    GridStateSnapshot,
    Lane,
    MetadataLaneValue,
    PrivateKeyRefused,
    ProviderRecord,
    RecordSignals,
)


def _record(queue: float | None = None) -> ProviderRecord:
    return ProviderRecord(
        name="vllm-a",
        cluster="vllm-a",
        site="east",
        backend_kind="local",
        models=("llama",),
        healthy=True,
        observed_at=100.0,
        signals=RecordSignals(queue_depth=queue),
    )


def test_each_lane_has_its_own_revision() -> None:
    snap = GridStateSnapshot.empty("east")
    snap = snap.put_provider("vllm-a", _record())
    snap = snap.set_lane(Lane.GATEWAY, GatewayLaneValue(egress_address="10.0.0.1:443"))
    assert snap.revision(Lane.STATE) == 1
    assert snap.revision(Lane.GATEWAY) == 1
    assert snap.revision(Lane.CERT) == 0
    assert snap.revision(Lane.METADATA) == 0


def test_setting_an_unchanged_lane_keeps_its_revision() -> None:
    value = MetadataLaneValue(region="eu", zone="eu-1")
    snap = GridStateSnapshot.empty("east").set_lane(Lane.METADATA, value)
    assert snap.set_lane(Lane.METADATA, value) is snap


def test_newer_provider_write_replaces_older_after_merge() -> None:
    base = GridStateSnapshot.empty("east").put_provider("vllm-a", _record(0.1))
    newer = base.put_provider("vllm-a", _record(0.9))
    assert base.merge(newer).state.live_providers()["vllm-a"].signals.queue_depth == 0.9
    assert newer.merge(base).state.live_providers()["vllm-a"].signals.queue_depth == 0.9


def test_removed_provider_is_absent_from_live_providers() -> None:
    snap = GridStateSnapshot.empty("east").put_provider("vllm-a", _record())
    snap = snap.remove_provider("vllm-a")
    assert snap.state.live_providers() == {}


def test_restart_with_higher_base_revision_wins_over_old_state() -> None:
    old = GridStateSnapshot.empty("east").put_provider("vllm-a", _record(0.5))
    old = old.add_capability("models", "llama").remove_capability("models", "llama")
    restarted = GridStateSnapshot.empty("east", base_revision=1_000)
    restarted = restarted.put_provider("vllm-a", _record(0.2)).add_capability("models", "llama")
    merged = old.merge(restarted)
    assert merged.state.live_providers()["vllm-a"].signals.queue_depth == 0.2
    assert "llama" in merged.state.models


def test_spend_counts_only_the_origin_slot() -> None:
    snap = GridStateSnapshot.empty("east").add_spend("tenant-a", 5).add_spend("tenant-a", 2)
    assert snap.state.spend["tenant-a"].slots == {"east": 7}
    with pytest.raises(CounterRefusal):
        snap.add_spend("tenant-a", -1)


def test_cert_lane_refuses_private_key_pem() -> None:
    with pytest.raises(PrivateKeyRefused) as info:
        CertLaneValue(pem="-----BEGIN PRIVATE KEY-----\nabc\n-----END PRIVATE KEY-----\n")
    assert "abc" not in str(info.value)


def test_merge_refuses_other_origin() -> None:
    with pytest.raises(ValueError):
        GridStateSnapshot.empty("east").merge(GridStateSnapshot.empty("west"))


def test_unknown_capability_kind_is_refused() -> None:
    with pytest.raises(KeyError):
        GridStateSnapshot.empty("east").add_capability("gpus", "h100")
