"""The GRID frame: layout, the documented test vector, and every drop reason."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grid.core.wire import frame
from grid.core.wire.frame import (
    OVERHEAD_BYTES,
    FrameAuthFailed,
    FrameCounters,
    FrameError,
    seal,
    unseal,
)
from grid.core.wire.keyring import Keyring
from grid.errors import ProtocolError

KEY = bytes(range(32))
OTHER = bytes(range(1, 33))
DOCS = Path(__file__).resolve().parents[3] / "docs" / "wire.md"


def _doc_vector() -> dict[str, bytes]:
    """The one test vector written in docs/wire.md, read from the document itself."""
    text = DOCS.read_text(encoding="utf-8")
    found = dict(re.findall(r"^\| `(key|nonce|plaintext|frame)` \| `([0-9a-f]*)` \|$", text, re.M))
    return {name: bytes.fromhex(value) for name, value in found.items()}


def test_documented_test_vector_matches_byte_for_byte() -> None:
    vector = _doc_vector()
    assert set(vector) == {"key", "nonce", "plaintext", "frame"}
    assert seal(vector["key"], vector["plaintext"], vector["nonce"]) == vector["frame"]
    assert unseal([vector["key"]], vector["frame"]) == vector["plaintext"]


def test_test_vector_is_gcm_spec_test_case_14() -> None:
    # McGrew & Viega, "The GCM mode of operation", test case 14 (AES-256):
    # an independent check that the frame wraps standard AES-256-GCM.
    packet = seal(bytes(32), bytes(16), bytes(12))
    assert packet == (
        b"GRID\x01"
        + bytes(12)
        + bytes.fromhex("cea7403d4d606b6e074ec5d3baf39d18")
        + bytes.fromhex("d0d1c8a799996bf0265b98b5d48ab919")
    )


def test_frame_layout_has_33_bytes_of_overhead() -> None:
    packet = seal(KEY, b"hello", b"\x07" * 12)
    assert packet[:4] == b"GRID"
    assert packet[4] == 0x01
    assert packet[5:17] == b"\x07" * 12
    assert len(packet) == len(b"hello") + OVERHEAD_BYTES == len(b"hello") + 33


def test_seal_without_nonce_uses_a_fresh_random_nonce() -> None:
    a, b = seal(KEY, b"x"), seal(KEY, b"x")
    assert a[5:17] != b[5:17]
    assert a != b
    assert unseal([KEY], a) == unseal([KEY], b) == b"x"


def test_seal_uses_the_given_nonce() -> None:
    nonce = bytes(range(12))
    packet = seal(KEY, b"x", nonce)
    assert packet[5:17] == nonce
    assert seal(KEY, b"x", nonce) == packet
    assert Keyring(KEY).seal(b"x", nonce) == packet
    assert unseal([KEY], packet) == b"x"


def test_core_frame_module_draws_nonces_from_secrets_only() -> None:
    tree = ast.parse(Path(frame.__file__).read_text(encoding="utf-8"))
    modules = {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {alias.name for alias in node.names}
    imported = {name.split(".")[0] for name in modules}
    assert "secrets" in imported
    assert not imported & {"os", "random", "importlib"}
    assert not any(name.startswith("grid.adapters") for name in modules)


@pytest.mark.parametrize(
    ("packet", "reason"),
    [
        (b"", "too_short"),
        (b"GRID\x01" + bytes(27), "too_short"),
        (b"GRIX\x01" + bytes(40), "bad_magic"),
        (b"GRID\x02" + bytes(40), "unknown_version"),
        (b"GRID\x01" + bytes(40), "auth_failed"),
    ],
)
def test_unseal_reasons(packet: bytes, reason: str) -> None:
    with pytest.raises(FrameError) as info:
        unseal([KEY], packet)
    assert info.value.reason == reason
    assert info.value.code == f"frame_{reason}"
    assert isinstance(info.value, ProtocolError)


def test_wrong_key_fails_authentication() -> None:
    with pytest.raises(FrameAuthFailed):
        unseal([OTHER], seal(KEY, b"secret"))


def test_no_keys_fails_authentication() -> None:
    with pytest.raises(FrameAuthFailed):
        unseal([], seal(KEY, b"secret"))


@pytest.mark.parametrize("bad", [b"", bytes(16), bytes(31), bytes(33)])
def test_keys_must_be_32_bytes(bad: bytes) -> None:
    with pytest.raises(ValueError):
        seal(bad, b"x", bytes(12))
    with pytest.raises(ValueError):
        Keyring(bad)


def test_nonce_must_be_12_bytes() -> None:
    with pytest.raises(ValueError):
        seal(KEY, b"x", bytes(8))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64), st.binary(min_size=12, max_size=12), st.data())
def test_any_tampered_byte_is_dropped(plaintext: bytes, nonce: bytes, data: st.DataObject) -> None:
    packet = bytearray(seal(KEY, plaintext, nonce))
    assert unseal([KEY], bytes(packet)) == plaintext
    index = data.draw(st.integers(0, len(packet) - 1))
    packet[index] ^= data.draw(st.integers(1, 255))
    with pytest.raises(FrameError):
        unseal([KEY], bytes(packet))


def test_keyring_seals_with_primary_and_accepts_up_to_two_more() -> None:
    k3 = bytes(range(2, 34))
    ring = Keyring(KEY, [OTHER, k3])
    assert ring.primary == KEY
    for key in (KEY, OTHER, k3):
        assert ring.unseal(seal(key, b"m")) == b"m"
    assert unseal([KEY], ring.seal(b"m")) == b"m"
    with pytest.raises(ValueError):
        Keyring(KEY, [OTHER, k3, bytes(range(3, 35))])


def test_keyring_rotation_keeps_the_old_primary_accepted() -> None:
    ring = Keyring(KEY).rotate(OTHER)
    assert ring.primary == OTHER
    assert ring.keys == (OTHER, KEY)
    assert ring.unseal(seal(KEY, b"old")) == b"old"
    newest = ring.rotate(bytes(range(2, 34))).rotate(bytes(range(3, 35)))
    assert KEY not in newest.keys and len(newest.keys) == 3


def test_keyring_never_shows_key_bytes() -> None:
    ring = Keyring(KEY, [OTHER])
    assert repr(ring) == "Keyring(keys=2)"
    assert KEY.hex() not in repr(ring)


def test_open_or_drop_counts_each_reason() -> None:
    ring = Keyring(KEY)
    counters = FrameCounters()
    assert ring.open_or_drop(seal(KEY, b"ok"), counters) == b"ok"
    for packet in (b"x", b"GRIX" + bytes(40), b"GRID\x09" + bytes(40), seal(OTHER, b"no")):
        assert ring.open_or_drop(packet, counters) is None
    assert counters.dropped == {
        "too_short": 1,
        "bad_magic": 1,
        "unknown_version": 1,
        "auth_failed": 1,
    }
    assert counters.total == 4
