"""Origin authentication: the signing input, signatures, certificate trust and the pending queue."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grid.core.crdt.origin import (
    SIGNING_TAG,
    OriginAuth,
    OriginRefused,
    OriginTrust,
    PendingItems,
    item_signature_valid,
    signing_input,
)
from grid.core.crdt.payload import encode_lane
from grid.core.crdt.replica import GridState, MergeOutcome
from grid.core.crdt.snapshot import GatewayLaneValue, Lane
from grid.core.swim.messages import BroadcastItem
from grid.demo.pki import DevCA
from grid.testing.origin import SitePki


def test_signing_input_is_the_documented_length_prefixed_layout() -> None:
    data = signing_input(Lane.STATE, "west", 2**62, b"\x01\x02")
    assert data == (
        SIGNING_TAG
        + b"\x00\x00\x00\x05state"
        + b"\x00\x00\x00\x04west"
        + (2**62).to_bytes(8, "big")
        + b"\x00\x00\x00\x02\x01\x02"
    )
    assert SIGNING_TAG == b"grid.swim.v1.item-signature\x00"


@given(
    st.tuples(st.sampled_from(list(Lane)), st.text(max_size=8), st.integers(0, 2**64 - 1)),
    st.tuples(st.sampled_from(list(Lane)), st.text(max_size=8), st.integers(0, 2**64 - 1)),
    st.binary(max_size=16),
    st.binary(max_size=16),
)
def test_signing_input_is_injective(
    a: tuple[Lane, str, int], b: tuple[Lane, str, int], pa: bytes, pb: bytes
) -> None:
    same = a == b and pa == pb
    assert (signing_input(*a, pa) == signing_input(*b, pb)) == same


@pytest.mark.parametrize("key_kind", ["ec-p256", "ed25519"])
def test_a_signed_item_verifies_and_any_change_breaks_it(key_kind: str) -> None:
    pki = SitePki.create(["west"], key_kind=key_kind)  # type: ignore[arg-type]
    signer = pki.signer("west")
    item = signer.sign_item(BroadcastItem(Lane.GATEWAY, "west", 7, b"payload"))
    assert item.signature
    assert item_signature_valid(signer.public_key, item)
    for forged in (
        BroadcastItem(Lane.GATEWAY, "west", 8, b"payload", item.signature),
        BroadcastItem(Lane.METADATA, "west", 7, b"payload", item.signature),
        BroadcastItem(Lane.GATEWAY, "east", 7, b"payload", item.signature),
        BroadcastItem(Lane.GATEWAY, "west", 7, b"payloae", item.signature),
        BroadcastItem(Lane.GATEWAY, "west", 7, b"payload"),
    ):
        assert not item_signature_valid(signer.public_key, forged)


def test_pin_mode_accepts_only_the_pinned_certificate_of_that_origin() -> None:
    now_s = time.time()  # certificates are issued at test time
    pki = SitePki.create(["west", "east"])
    trust = pki.trust()
    west_pem = pki.cert_lane("west").pem
    verified = trust.check("west", west_pem, now_s)
    assert verified.fingerprint == pki.issued["west"].fingerprint
    with pytest.raises(OriginRefused) as wrong:
        trust.check("east", west_pem, now_s)
    assert wrong.value.code == "cert_wrong_origin"
    unpinned = OriginTrust(trust.roots, "pin", {"west": frozenset({"0" * 64})})
    with pytest.raises(OriginRefused):
        unpinned.check("west", west_pem, now_s)


def test_spiffe_mode_matches_the_last_path_segment() -> None:
    now_s = time.time()  # certificates are issued at test time
    pki = SitePki.create(["west"], mode="spiffe")
    trust = pki.trust()
    assert trust.check("west", pki.cert_lane("west").pem, now_s).public_key is not None
    with pytest.raises(OriginRefused, match="name the origin"):
        trust.check("east", pki.cert_lane("west").pem, now_s)
    other_domain = OriginTrust(trust.roots, "spiffe", trust_domain="elsewhere.test")
    with pytest.raises(OriginRefused):
        other_domain.check("west", pki.cert_lane("west").pem, now_s)


def test_a_chain_to_another_ca_expired_or_garbage_is_untrusted() -> None:
    now_s = time.time()  # certificates are issued at test time
    pki = SitePki.create(["west"])
    stranger = DevCA().issue_site("west")
    pins = {"west": frozenset({stranger.fingerprint})}
    foreign = OriginTrust(pki.trust().roots, "pin", pins)
    for pem, now in (
        (stranger.cert_pem.decode(), now_s),
        (pki.cert_lane("west").pem, now_s + 400 * 86400),
        ("not a certificate", now_s),
        ("", now_s),
    ):
        trust = foreign if pem.startswith("-----") and now == now_s else pki.trust()
        with pytest.raises(OriginRefused) as refused:
            trust.check("west", pem, now)
        assert refused.value.code == "cert_untrusted"


def test_pending_items_keep_the_newest_per_origin_and_lane_within_the_bound() -> None:
    pending = PendingItems(limit=2)
    assert pending.hold(BroadcastItem(Lane.STATE, "a", 1, b""))
    assert pending.hold(BroadcastItem(Lane.STATE, "a", 3, b""))
    assert pending.hold(BroadcastItem(Lane.STATE, "a", 2, b""))
    assert pending.hold(BroadcastItem(Lane.GATEWAY, "a", 1, b""))
    assert not pending.hold(BroadcastItem(Lane.STATE, "b", 1, b""))
    assert [(i.lane, i.revision) for i in pending.release("a")] == [
        (Lane.STATE, 3),
        (Lane.GATEWAY, 1),
    ]
    assert len(pending) == 0


def _west_and_east(key_kind: str = "ec-p256") -> tuple[SitePki, GridState, GridState]:
    pki = SitePki.create(["west", "east"], key_kind=key_kind)  # type: ignore[arg-type]
    return pki, pki.replica("west"), pki.replica("east")


def test_items_wait_for_their_origins_certificate_then_apply() -> None:
    _, west, east = _west_and_east()
    [gateway] = west.update_local(west.local.set_lane(Lane.GATEWAY, GatewayLaneValue("w:1")))
    assert east.admit(gateway) == []
    assert east.pending == 1 and east.snapshot("west") is None
    cert = west.item("west", Lane.CERT)
    assert east.admit(cert) == [cert, gateway]
    snap = east.snapshot("west")
    assert snap is not None and snap.gateway.egress_address == "w:1"
    assert east.trusted("west") and east.pending == 0


@pytest.mark.parametrize("key_kind", ["ec-p256", "ed25519"])
def test_forged_and_unsigned_items_are_dropped_and_counted(key_kind: str) -> None:
    pki, west, east = _west_and_east(key_kind)
    east.admit(west.item("west", Lane.CERT))
    payload = encode_lane(GatewayLaneValue("evil:1"))
    unsigned = BroadcastItem(Lane.GATEWAY, "west", 2**62, payload)
    forged = pki.signer("east").sign_item(unsigned)  # east's key, not west's
    assert east.apply(unsigned) is MergeOutcome.REJECTED
    assert east.apply(forged) is MergeOutcome.REJECTED
    assert east.counters.dropped["unsigned"] == 1
    assert east.counters.dropped["bad_signature"] == 1
    snap = east.snapshot("west")
    assert snap is not None and snap.revision(Lane.GATEWAY) == 0


def test_a_cert_of_another_site_or_without_proof_of_possession_is_refused() -> None:
    pki, west, east = _west_and_east()
    west_cert = west.item("west", Lane.CERT)
    # East's genuine certificate, signed by east, but claimed for west.
    claimed = pki.signer("east").sign_item(
        BroadcastItem(Lane.CERT, "west", 9, encode_lane(pki.cert_lane("east")))
    )
    assert east.apply(claimed) is MergeOutcome.REJECTED
    assert east.counters.dropped["cert_wrong_origin"] == 1
    # West's genuine certificate replayed at a higher revision without west's signature.
    replay = BroadcastItem(Lane.CERT, "west", 9, west_cert.payload)
    assert east.apply(replay) is MergeOutcome.REJECTED
    assert east.counters.dropped["unsigned"] == 1
    assert not east.trusted("west")


def test_an_origin_without_a_verified_certificate_contributes_nothing() -> None:
    from grid.core.crdt.record import ProviderRecord

    _, west, east = _west_and_east()
    record = ProviderRecord(name="p", cluster="p", site="west", backend_kind="local")
    [state] = west.update_local(west.local.put_provider("p", record).add_spend("t", 2))
    east.admit(state)
    assert list(east.providers()) == [] and east.spend("t").value == 0
    east.admit(west.item("west", Lane.CERT))
    assert [o for o, _, _ in east.providers()] == ["west"] and east.spend("t").value == 2


def test_withdrawn_trust_forgets_the_origin() -> None:
    pki, west, east = _west_and_east()
    east.admit(west.item("west", Lane.CERT))
    assert east.trusted("west")
    mispinned = OriginTrust(pki.trust().roots, "pin", {"west": frozenset({"0" * 64})})
    assert east.set_trust(mispinned) == ["west"]
    assert not east.trusted("west") and east.snapshot("west") is None


def test_a_forged_item_about_ourselves_is_not_reasserted() -> None:
    _, west, _ = _west_and_east()
    before = west.local.revision(Lane.STATE)
    forged = BroadcastItem(Lane.STATE, "west", 2**62, bytes(range(200)))
    assert west.admit(forged) == []
    assert west.local.revision(Lane.STATE) == before
    assert west.counters.dropped["bad_signature"] == 1


def _unpinned_north() -> tuple[SitePki, GridState, GridState]:
    """East trusts the CA but pins only west; north holds a CA-issued certificate."""
    pki = SitePki.create(["west", "east", "north"])
    pins = {"west": [pki.issued["west"].fingerprint], "east": [pki.issued["east"].fingerprint]}
    east = GridState(
        "east",
        auth=OriginAuth(
            OriginTrust.from_pem(pki.ca.cert_pem, "pin", pins), pki.clock, pki.signer("east")
        ),
    )
    return pki, pki.replica("north"), east


def test_an_unpinned_ca_certificate_introduces_its_site_without_being_believed() -> None:
    from grid.core.crdt.record import ProviderRecord
    from grid.core.crdt.snapshot import MetadataLaneValue

    pki, north, east = _unpinned_north()
    items = north.update_local(
        north.local.set_lane(Lane.GATEWAY, GatewayLaneValue("n:1"))
        .set_lane(Lane.METADATA, MetadataLaneValue(region="eu"))
        .put_provider(
            "p", ProviderRecord(name="p", cluster="p", site="north", backend_kind="local")
        )
    )
    for item in [*items, north.item("north", Lane.CERT)]:
        east.admit(item)
    assert not east.trusted("north") and east.snapshot("north") is None
    assert list(east.providers()) == []
    assert east.counters.dropped["cert_wrong_origin"] == 1
    seen = east.introduced("north")
    assert seen is not None
    cert, gateway, metadata = seen
    assert cert == pki.cert_lane("north")
    assert gateway.egress_address == "n:1" and metadata.region == "eu"


def test_an_introduction_shows_no_lane_signed_by_another_key_nor_a_foreign_ca() -> None:
    pki, north, east = _unpinned_north()
    east.admit(north.item("north", Lane.CERT))
    forged = pki.signer("west").sign_item(
        BroadcastItem(Lane.GATEWAY, "north", 5, encode_lane(GatewayLaneValue("evil:1")))
    )
    east.admit(forged)
    seen = east.introduced("north")
    assert seen is not None and seen[1].egress_address == ""
    # A certificate from another CA introduces nobody.
    other = SitePki.create(["south"])
    stranger = other.replica("south")
    east.admit(stranger.item("south", Lane.CERT))
    assert east.introduced("south") is None
