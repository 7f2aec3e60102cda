"""Strings that carry their JSON literal: the store writes exactly what ``json.dumps`` would.

`dumps_object` splices the literals of `EncodedText` values into an object's
body; whatever the text (quotes, control characters, non-ASCII, lone
surrogates), whatever else the object holds (a value or key that looks like
the stand-in), the body is byte for byte the plain serialisation, and every
store reads back the plain strings.
"""

from __future__ import annotations

import copy
import json
import pickle
import sqlite3
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from grid.adapters.store.encoded import EncodedText, dumps_object
from grid.adapters.store.objects import json_copy
from grid.adapters.store.port import ResourceStore
from grid.adapters.store.sqlite import SqliteStore

MARK = "\x00grid-encoded-0\x00"
texts = st.one_of(
    st.text(),
    st.text(alphabet=st.sampled_from(['"', "\\", "\n", "\x00", "é", "\u2028", "🙂", "a"])),
    st.just(MARK),
    st.just(json.dumps({"candidates": [{"name": "zürich", "q": '"x"'}]})),
)


def encoded(text: str) -> EncodedText:
    return EncodedText(text, json.dumps(text))


def _plain(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


@settings(max_examples=300)
@given(
    st.dictionaries(st.one_of(st.text(max_size=5), st.just(MARK)), texts, max_size=4),
    st.dictionaries(st.text(max_size=5), texts, max_size=3),
    st.dictionaries(st.sampled_from(["labels", "note"]), texts, max_size=2),
)
def test_a_spliced_body_is_the_plain_serialisation(
    literal: dict[str, str], plain: dict[str, str], metadata: dict[str, str]
) -> None:
    data: dict[str, str] = {**plain, **{k: encoded(v) for k, v in literal.items()}}
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data}
    as_plain = {**obj, "data": {k: str(v) for k, v in data.items()}}
    assert dumps_object(obj) == _plain(as_plain)


def test_an_encoded_text_is_a_plain_string_to_copies() -> None:
    text = encoded('{"a":"é"}\n')
    assert json_copy({"data": {"k": text}}, "data")["data"]["k"] is text
    assert copy.deepcopy(text) is text
    again = pickle.loads(pickle.dumps(text))
    assert (again, again.literal) == (text, text.literal)
    assert type(text + "") is str


async def test_every_store_reads_back_the_plain_strings(store: ResourceStore) -> None:
    first, second = encoded('{"overlay":"é\\"x"}\n'), encoded('{"b":[1,2]}\n')
    cm: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "overlay", "namespace": "grid"},
        "data": {"grid-config.json": first, "other": "plain"},
    }
    created = await store.create(cm)
    assert (await store.get("ConfigMap", "overlay", namespace="grid"))["data"] == {
        "grid-config.json": str(first),
        "other": "plain",
    }
    replaced = {**cm, "metadata": {**cm["metadata"], **_version(created)}}
    replaced["data"] = {"grid-config.json": second, "other": "plain"}
    await store.replace(replaced)
    got = await store.get("ConfigMap", "overlay", namespace="grid")
    assert got["data"]["grid-config.json"] == str(second)
    assert json.loads(got["data"]["grid-config.json"]) == {"b": [1, 2]}


def _version(obj: dict[str, Any]) -> dict[str, str]:
    return {"resourceVersion": obj["metadata"]["resourceVersion"]}


async def test_the_sqlite_rows_hold_the_plain_serialisation(tmp_path: Path) -> None:
    store = await SqliteStore.open(tmp_path / "store.db")
    try:
        cm = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "overlay", "namespace": "grid"},
            "data": {"a": encoded('{"x":"\\u00e9\\n"}'), "b": encoded("zürich 🙂")},
        }
        created = await store.create(cm)
    finally:
        await store.close()
    conn = sqlite3.connect(tmp_path / "store.db")
    (body,) = conn.execute("SELECT body FROM objects WHERE kind='ConfigMap'").fetchone()
    (event,) = conn.execute("SELECT body FROM events WHERE kind='ConfigMap'").fetchone()
    conn.close()
    assert body == event == _plain(json.loads(_plain(created)))
