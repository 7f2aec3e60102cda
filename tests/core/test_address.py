"""`grid.core.address`: the one host:port parser and formatter."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grid.core.address import format_address, parse_address
from grid.errors import ValidationError

hosts = st.one_of(
    st.ip_addresses().map(str),
    st.from_regex(r"[a-z][a-z0-9-]{0,20}(\.[a-z][a-z0-9-]{0,20}){0,3}", fullmatch=True),
)


@given(hosts, st.integers(0, 65535))
def test_format_then_parse_gives_the_same_host_and_port(host: str, port: int) -> None:
    assert parse_address(format_address(host, port)) == (host, port)


@pytest.mark.parametrize(
    "text", ["", "east", "east:", ":7946", "east:http", "east:65536", "east:-1", "east:000007946"]
)
def test_anything_but_host_port_is_refused_without_repeating_the_text(text: str) -> None:
    with pytest.raises(ValidationError) as caught:
        parse_address(text)
    assert caught.value.path == "address"
    assert text not in caught.value.message or not text


def test_an_empty_host_takes_the_default_when_one_is_given() -> None:
    assert parse_address(":8443", default_host="0.0.0.0") == ("0.0.0.0", 8443)
    assert parse_address("[::1]:8443") == ("::1", 8443)
