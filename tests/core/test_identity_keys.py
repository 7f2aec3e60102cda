"""The keys file's lookup (`grid.core.identity.KeySet`): by digest, first line wins."""

from __future__ import annotations

import yaml
from hypothesis import given
from hypothesis import strategies as st

from grid.core.identity import KeySet, key_digest, key_line, parse_keys

KEYS = st.lists(
    st.tuples(st.sampled_from(["acme", "globex", "initech"]), st.text(min_size=1, max_size=40)),
    max_size=30,
)


def _set(pairs: list[tuple[str, str]]) -> KeySet:
    return KeySet(tuple((bytes.fromhex(key_digest(key)), tenant) for tenant, key in pairs))


@given(KEYS, st.text(max_size=40))
def test_a_key_names_the_tenant_of_its_first_line_and_nothing_else_names_one(
    pairs: list[tuple[str, str]], other: str
) -> None:
    keys = _set(pairs)
    for tenant, key in pairs:
        first = next(t for t, k in pairs if k == key)
        assert keys.tenant(key) == first, (tenant, key)
    if other not in {key for _tenant, key in pairs}:
        assert keys.tenant(other) is None


def test_the_lookup_reads_what_key_line_writes() -> None:
    text = key_line("acme", "sk-one") + key_line("globex", "sk-two") + key_line("x", "sk-one")
    keys = parse_keys(yaml.safe_load(text))
    assert (keys.tenant("sk-one"), keys.tenant("sk-two"), keys.tenant("sk-three")) == (
        "acme",
        "globex",
        None,
    )
    assert keys.tenants() == {"acme", "globex", "x"}
