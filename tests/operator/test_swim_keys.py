"""The swimKeyRef Secret's two layouts, refusals that keep the keyring, tuning changes."""

from __future__ import annotations

import base64

import pytest

from grid.core.resources import GridNetwork
from grid.core.wire.keyring import Keyring
from grid.operator.swim_keys import SwimKeyError, SwimKeys, keyring_from_secret, tuning_change
from grid.testing.store import InMemoryStore

A, B, C, D = (bytes([n]) * 32 for n in range(1, 5))


def secret(**items: bytes | str) -> dict[str, object]:
    data = {k: v if isinstance(v, str) else base64.b64encode(v).decode() for k, v in items.items()}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "swim", "namespace": "grid-system"},
        "data": {k.replace("_", "-"): v for k, v in data.items()},
    }


def network(**spec: object) -> GridNetwork:
    ref = {"name": "swim", "namespace": "grid-system"}
    return GridNetwork.model_validate(
        {"metadata": {"name": "net"}, "spec": {"tls": {"swimKeyRef": ref}, **spec}}
    )


def test_the_rotation_layout_gives_a_primary_and_older_accepted_keys() -> None:
    keyring = keyring_from_secret(secret(primary=A, previous_1=B, previous_2=C), "swim.key")
    assert keyring == Keyring(A, [B, C])


def test_the_single_key_layout_is_the_referenced_item() -> None:
    assert keyring_from_secret(
        {"data": secret()["data"] | {"k": base64.b64encode(D).decode()}}, "k"
    ) == Keyring(D)


@pytest.mark.parametrize(
    "obj",
    [secret(), secret(primary=b"short"), secret(primary="%%not-base64%%")],
)
def test_a_secret_without_a_usable_key_is_refused_without_echoing_it(obj: dict) -> None:
    with pytest.raises(SwimKeyError) as err:
        keyring_from_secret(obj, "swim.key")
    assert "short" not in str(err.value) and "%%" not in str(err.value)


async def test_a_broken_secret_keeps_the_current_keyring_and_is_reported() -> None:
    store = InMemoryStore()
    await store.create(secret(primary=A))
    keys = SwimKeys(store, None)
    current = await keys.load(network())
    assert current == Keyring(A) and keys.unreadable is None
    obj = await store.get("Secret", "swim", namespace="grid-system")
    obj["data"] = {"primary": base64.b64encode(b"short").decode()}
    await store.replace(obj)
    assert await keys.reload(network(), current) is None
    assert keys.unreadable == "grid-system/swim"
    obj = await store.get("Secret", "swim", namespace="grid-system")
    obj["data"] = secret(primary=B, previous_1=A)["data"]
    await store.replace(obj)
    assert await keys.reload(network(), current) == Keyring(B, [A])
    assert keys.unreadable is None
    assert await keys.reload(network(), Keyring(B, [A])) is None


def test_a_changed_swim_spec_or_seed_list_calls_for_a_restart() -> None:
    base = network(seeds=["10.0.0.1:7946"])
    assert tuning_change(base, network(seeds=["10.0.0.1:7946"])) is None
    assert tuning_change(base, network(seeds=["10.0.0.2:7946"])) == "spec.seeds"
    probe = network(seeds=["10.0.0.1:7946"], swim={"probeInterval": "1s"})
    assert tuning_change(base, probe) == "spec.swim"
    assert tuning_change(None, base) is None


async def test_a_reference_naming_no_key_reads_swim_key_then_upstreams_key_item() -> None:
    store = InMemoryStore()
    upstream = {"data": {"key": base64.b64encode(D).decode()}}
    await store.create(secret() | upstream)
    assert await SwimKeys(store, None).load(network()) == Keyring(D)
    obj = await store.get("Secret", "swim", namespace="grid-system")
    obj["data"]["swim.key"] = base64.b64encode(A).decode()
    await store.replace(obj)
    assert await SwimKeys(store, None).load(network()) == Keyring(A)
