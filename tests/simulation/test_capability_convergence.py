"""Capability sets converge add-wins on every site, in a seeded gossip simulation.

Part one: replicas of one models OR-Set take random concurrent adds and removes
and exchange states in random pairs, with duplicates and reordering, until
every pair has met. All replicas end equal, and a model is present exactly
when some add of it was never observed by a remove: a removal at one site
never beats a concurrent re-add at another.

Part two: through the grid's own replicas (`GridState`) and broadcast items,
west removes a model from its set while east, concurrently, re-adds it to its
set. After delivery in a random order every site sees the model in the grid's
models. Each run prints its seed; replay one with ``GRID_SIM_SEED``.
"""

from __future__ import annotations

import os
import random

from grid.core.crdt.orset import ORSet, Tag
from grid.core.crdt.replica import GridState
from grid.core.crdt.snapshot import GridStateSnapshot

MODELS = ("llama", "qwen", "mistral", "phi")


def seed() -> int:
    value = int(os.environ.get("GRID_SIM_SEED", random.randrange(2**32)))
    print(f"capability simulation seed {value}")
    return value


def test_concurrent_removes_and_re_adds_converge_add_wins() -> None:
    rng = random.Random(seed())
    sites = [f"site-{i}" for i in range(5)]
    sets: dict[str, ORSet[str]] = {s: ORSet() for s in sites}
    added: set[tuple[str, Tag]] = set()
    removed: set[Tag] = set()
    for _ in range(400):
        site = rng.choice(sites)
        op = rng.random()
        if op < 0.4:
            model = rng.choice(MODELS)
            before = sets[site]
            sets[site] = before.add(model, site)
            (tag,) = sets[site].entries[model] - before.entries.get(model, frozenset())
            added.add((model, tag))
        elif op < 0.7:
            model = rng.choice(MODELS)
            removed |= sets[site].entries.get(model, frozenset())
            sets[site] = sets[site].remove(model)
        else:
            other = rng.choice(sites)
            sets[other] = sets[other].merge(sets[site])  # one-way delivery, maybe a duplicate
    # Anti-entropy: every pair meets, in a random order, twice.
    pairs = [(a, b) for a in sites for b in sites if a != b] * 2
    rng.shuffle(pairs)
    for a, b in pairs:
        sets[b] = sets[b].merge(sets[a])
    for a in sites:
        for b in sites:
            sets[b] = sets[b].merge(sets[a])
    final = {s.elements for s in sets.values()}
    assert len(final) == 1
    (present,) = final
    assert present == {model for model, tag in added if tag not in removed}


def test_a_model_removed_at_one_site_while_re_added_at_another_stays_everywhere() -> None:
    rng = random.Random(seed())
    names = ["east", "west", "central"]
    replicas = {n: GridState(n) for n in names}
    for name in names:
        snap = replicas[name].local.add_capability("models", "llama")
        replicas[name].update_local(snap)
    items = [i for r in replicas.values() for i in r.items()]
    for replica in replicas.values():
        for item in items:
            replica.apply(item)
    # Concurrently: west removes llama from its set, east removes and re-adds it.
    west = replicas["west"]
    west_items = west.update_local(west.local.remove_capability("models", "llama"))
    east = replicas["east"]
    east_snap: GridStateSnapshot = east.local.remove_capability("models", "llama")
    east_items = east.update_local(east_snap.add_capability("models", "llama"))
    central = replicas["central"]
    central_items = central.update_local(central.local.remove_capability("models", "llama"))
    deliveries = [(n, i) for n in names for i in (*west_items, *east_items, *central_items)]
    deliveries *= 2  # duplicates
    rng.shuffle(deliveries)
    for name, item in deliveries:
        replicas[name].apply(item)
    for replica in replicas.values():
        assert replica.capabilities("models") == {"llama"}
        assert replica.snapshot("west") == replicas["west"].local
        assert replica.snapshot("east") == replicas["east"].local
