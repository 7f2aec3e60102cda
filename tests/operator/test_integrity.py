"""The operator's origin authentication: keys from files, trust from resources, metrics."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from prometheus_client import CollectorRegistry, generate_latest

from grid.core.crdt.replica import GridState
from grid.core.crdt.snapshot import Lane
from grid.core.resources import GridNetwork, GridSite
from grid.core.swim.messages import BroadcastItem
from grid.demo.plan import network_doc, plan_mesh, site_doc
from grid.operator.integrity import (
    ItemCounters,
    KeyRefused,
    load_signer,
    origin_auth,
    read_ca,
    trust_for,
)


def test_an_rsa_or_unreadable_site_key_is_refused_without_echoing_it(tmp_path: Path) -> None:
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    path = tmp_path / "rsa.pem"
    pem = rsa_key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    path.write_bytes(pem)
    with pytest.raises(KeyRefused, match="ECDSA P-256 or Ed25519") as refused:
        load_signer(path)
    assert "PRIVATE" not in str(refused.value)
    garbage = tmp_path / "garbage.pem"
    garbage.write_bytes(b"-----BEGIN PRIVATE KEY-----\nsecret\n")
    with pytest.raises(KeyRefused) as unreadable:
        load_signer(garbage)
    assert "secret" not in str(unreadable.value)
    assert load_signer(None) is None
    with pytest.raises(KeyRefused, match="grid CA"):
        read_ca(garbage)


def test_trust_takes_the_network_mode_and_every_gridsite_pin(pki: Any, tmp_path: Path) -> None:
    plan = plan_mesh(tmp_path, ["east", "west"])
    network = GridNetwork.model_validate(
        network_doc(plan, probe_interval="1s", suspicion_timeout="2s", credential_base=tmp_path)
    )
    sites = [
        GridSite.model_validate(site_doc(plan.sites[s], pki.sites[s].fingerprint))
        for s in ("east", "west")
    ]
    trust = trust_for(pki.ca.read_bytes(), network, sites)
    assert trust.mode == "pin" and len(trust.roots) == 1
    assert trust.pins == {s: frozenset({pki.sites[s].fingerprint}) for s in ("east", "west")}
    spiffe_doc = network_doc(
        plan, probe_interval="1s", suspicion_timeout="2s", credential_base=tmp_path
    )
    spiffe_doc["spec"]["tls"]["trust"] = {"mode": "spiffe", "trustDomain": "grid.local"}
    spiffe = trust_for(pki.ca.read_bytes(), GridNetwork.model_validate(spiffe_doc), sites)
    west_pem = pki.sites["west"].cert.read_text()
    assert spiffe.check("west", west_pem, time.time()).fingerprint == pki.sites["west"].fingerprint


def test_dropped_items_and_the_pending_queue_are_exported(pki: Any) -> None:
    registry = CollectorRegistry()
    replica = GridState("east", auth=origin_auth(pki.ca, pki.sites["east"].key))
    ItemCounters(replica, registry)
    replica.admit(BroadcastItem(Lane.STATE, "west", 2**62, bytes(200)))
    replica.admit(BroadcastItem(Lane.STATE, "east", 2**62, bytes(200)))
    text = generate_latest(registry).decode()
    assert 'grid_swim_items_dropped_total{reason="bad_signature"} 1.0' in text
    assert 'grid_swim_items_dropped_total{reason="unsigned"} 0.0' in text
    assert "grid_swim_items_pending 1.0" in text


def test_trust_takes_every_canonical_pin_of_a_gridsite(pki: Any, tmp_path: Path) -> None:
    plan = plan_mesh(tmp_path, ["east", "west"])
    doc = site_doc(plan.sites["west"], pki.sites["west"].fingerprint)
    doc["spec"]["trust"]["canonicalFingerprints"] = [pki.sites["central"].fingerprint]
    trust = trust_for(pki.ca.read_bytes(), None, [GridSite.model_validate(doc)])
    assert trust.pins == {
        "west": frozenset({pki.sites["west"].fingerprint, pki.sites["central"].fingerprint})
    }
