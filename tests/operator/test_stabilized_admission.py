"""The overlay loop keeps upstream's stabilized-admission machine across renders (§2a)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from prometheus_client import CollectorRegistry

from grid.core.resources import GridNetwork, parse_resource
from grid.core.routing.signals import SignalsDocument, parse_signals
from grid.operator.output import OverlayWriter
from grid.operator.overlay_loop import OverlayLoop

PRESSURE = {
    "enterThreshold": 0.8,
    "exitThreshold": 0.5,
    "failureThreshold": 2,
    "successThreshold": 2,
    "minimumStateDuration": "1s",
    "recoveryHoldDown": "5s",
}


def network(mode: str) -> GridNetwork:
    net = parse_resource(
        {
            "apiVersion": "grid.praxis-proxy.io/v1alpha1",
            "kind": "GridNetwork",
            "metadata": {"name": "grid"},
            "spec": {
                "scoringPolicy": {"strategy": "queueDepth"},
                "admissionPolicy": {"mode": mode, "pressure": PRESSURE},
            },
        }
    )
    assert isinstance(net, GridNetwork)
    return net


def signals(queue: float, at_s: float) -> SignalsDocument:
    when = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=at_s)
    return parse_signals(
        {
            "schema_version": "1.0.0",
            "network": "grid",
            "site": "east",
            "epoch": 1,
            "sequence": 1,
            "generated_at": when.isoformat(),
            "providers": [
                {
                    "name": "vllm",
                    "cluster": "vllm",
                    "site": "east",
                    "backend_kind": "local",
                    "models": ["m"],
                    "observed_at": when.isoformat(),
                    "signals": {"queue_depth": queue},
                }
            ],
        }
    )


def loop(store: Any) -> OverlayLoop:
    return OverlayLoop("east", OverlayWriter(store, None), CollectorRegistry())


def test_the_hold_set_follows_the_machine_across_rounds(store: Any) -> None:
    overlays = loop(store)
    net = network("stabilized")
    rounds = [(0, 0.9), (2, 0.9), (3, 0.9), (4, 0.1), (5, 0.1), (7, 0.1), (8, 0.1)]
    held = [bool(overlays.stabilized_holds(net, signals(q, t), t)) for t, q in rounds]
    # Held after two high samples once 1 s passed; released after two low ones once
    # 5 s passed since the last high one (at 3 s).
    assert held == [False, True, True, True, True, True, False]


def test_instantaneous_mode_and_new_settings_keep_no_history(store: Any) -> None:
    overlays = loop(store)
    assert overlays.stabilized_holds(network("instantaneous"), signals(0.9, 0), 0) is None
    net = network("stabilized")
    for t in (0, 2):
        overlays.stabilized_holds(net, signals(0.9, t), t)
    assert overlays.stabilized_holds(net, signals(0.9, 3), 3) == {("east", "vllm")}
    changed = net.model_copy(deep=True)
    assert changed.spec.admission_policy is not None
    changed.spec.admission_policy.pressure.failure_threshold = 3
    assert overlays.stabilized_holds(changed, signals(0.9, 4), 4) == frozenset()
