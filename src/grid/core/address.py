"""Network addresses as Grid writes them: ``host:port``, with IPv6 hosts in brackets.

One parser and one formatter for every flag, manifest field and listener that names
an address (SWIM seeds and advertise, listener binds, egress probes, gateway
listeners), so ``[::1]:7946`` means the same everywhere and a bad address is refused
with the same message.
"""

from __future__ import annotations

from grid.errors import ValidationError

PORT_MAX = 65535


def format_address(host: str, port: int) -> str:
    """``"host:port"``, with brackets around an IPv6 host."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse_address(text: str, *, default_host: str | None = None) -> tuple[str, int]:
    """Split ``"host:port"`` (or ``"[v6]:port"``) into host and port.

    An empty host (``":8443"``) is ``default_host`` when one is given. Raises
    `ValidationError` (path ``address``) for anything else that is not host:port
    with a port in 0..65535; the message never repeats the text.
    """
    host, sep, port_text = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host and default_host is not None:
        host = default_host
    if not sep or not host or not port_text.isdigit() or len(port_text) > 5:
        raise ValidationError("expected host:port", path="address")
    port = int(port_text)
    if port > PORT_MAX:
        raise ValidationError("port out of range", path="address")
    return host, port
