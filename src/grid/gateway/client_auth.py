"""The ``client_auth`` filter: the tenant a request is charged to (SPEC-DECISIONS §15).

`ClientAuth.tenant` runs first for every routed request, before any provider is
contacted, and either names the request's tenant or refuses it:

- ``none``: the tenant header is trusted (for trusted networks only). Two
  copies, or a blank or over-long value, are refused 400 ``ambiguous_tenant``;
  a request without it is charged to ``default_tenant`` when one is set.
- ``api_key``: the key (``Authorization: Bearer`` or ``x-api-key``, exactly one)
  is hashed and looked up in the keys file (`grid.core.identity.KeySet`, a
  constant-time comparison of digests). The file is re-read when it changes
  (`poll`); one that is unreadable, malformed or gone keeps the last good set,
  and says so once in the log and on ``grid_gateway_client_keys_reloads_total``.
- ``mtls``: the listener requires a client certificate from the CA
  (`server_context`); the tenant is its SPIFFE ID's last segment or its CN.

Under ``api_key`` and ``mtls`` the client's tenant header is ignored, and a
request without a valid credential gets 401 ``unauthenticated``. The key is
never logged, counted by value or kept: only its digest is compared.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Iterator
from pathlib import Path

import yaml
from aiohttp import web
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from grid import errors
from grid.adapters.bounded_file import UnreadableFile, read_bounded
from grid.adapters.file_stamp import FileStamp, file_stamp
from grid.core.identity import (
    KeySet,
    KeysFileError,
    certificate_tenant,
    header_tenant,
    parse_keys,
    presented_key,
)
from grid.gateway.config import ClientAuthConfig
from grid.gateway.plan import Refusal

log = logging.getLogger(__name__)

KEYS_FILE_MAX_BYTES = 8 * 1024 * 1024
"""Largest keys file read (65,536 lines of about 100 bytes fit)."""


class Refused(errors.Refusal):
    """A request refused before routing; `refusal` is the gateway's answer to it."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.message, code=refusal.code)
        self.refusal = refusal


UNAUTHENTICATED = Refusal(
    401, "unauthenticated", "a valid client credential is required", "unauthenticated"
)
AMBIGUOUS_TENANT = Refusal(
    400,
    "ambiguous_tenant",
    "the tenant header must be sent once, non-blank, at most 256 characters",
    "bad_request",
)


class ClientAuth(Collector):
    """Establishes each request's tenant; a Prometheus collector of the keys file's state."""

    def __init__(self, config: ClientAuthConfig, tenant_header: str) -> None:
        self.config = config
        self.mode = config.mode
        self.tenant_header = tenant_header
        self.keys = KeySet()
        self.reloads = {"accepted": 0, "rejected": 0}
        self._path = Path(config.keys_file) if config.keys_file else None
        self._stamp: FileStamp | None = None
        self._failing = False
        if self._path is not None:
            self._stamp = (-1, -1, -1)  # never a real stamp: the first poll reads
            self.poll()

    # -- the request path ---------------------------------------------------------

    def tenant(self, request: web.Request) -> str | None:
        """The tenant ``request`` is charged to; raises `Refused` to refuse it."""
        if self.mode == "api_key":
            headers = request.headers
            key = presented_key(
                headers.getall("Authorization", ()), headers.getall("x-api-key", ())
            )
            tenant = self.keys.tenant(key) if key is not None else None
            if tenant is None:
                raise Refused(UNAUTHENTICATED)
            return tenant
        if self.mode == "mtls":
            transport = request.transport
            peercert = transport.get_extra_info("peercert") if transport is not None else None
            tenant = certificate_tenant(peercert)
            if tenant is None:
                raise Refused(UNAUTHENTICATED)
            return tenant
        named = header_tenant(request.headers.getall(self.tenant_header, ()))
        if named is False:
            raise Refused(AMBIGUOUS_TENANT)
        return self.config.default_tenant if named is None else str(named)

    # -- the keys file ------------------------------------------------------------

    def poll(self) -> bool:
        """Re-read the keys file if it changed; True when a new set was taken."""
        path = self._path
        if path is None:
            return False
        stamp = file_stamp(path)
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            if stamp is None:
                raise UnreadableFile("the keys file is gone")
            keys = parse_keys(yaml.load(read_bounded(path, KEYS_FILE_MAX_BYTES), yaml.CSafeLoader))
        except (UnreadableFile, KeysFileError, yaml.YAMLError, RecursionError) as exc:
            self.reloads["rejected"] += 1
            if not self._failing:
                self._failing = True
                log.warning(
                    "the client keys file does not load; keeping the last good set",
                    extra={"error": type(exc).__name__, "keys": len(self.keys.entries)},
                )
            return False
        self._failing = False
        self.keys = keys
        self.reloads["accepted"] += 1
        log.info("client keys loaded", extra={"keys": len(keys.entries)})
        return True

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        """The keys held and the reload outcomes (``api_key`` mode only)."""
        if self._path is None:
            return
        yield GaugeMetricFamily(
            "grid_gateway_client_keys", "Client keys held (the last good keys file).",
            value=len(self.keys.entries),
        )  # fmt: skip
        family = CounterMetricFamily(
            "grid_gateway_client_keys_reloads",
            "Reads of a changed keys file by outcome; rejected keeps the last good set.",
            labels=["outcome"],
        )
        for outcome, value in self.reloads.items():
            family.add_metric([outcome], value)
        yield family


def server_context(config: ClientAuthConfig) -> ssl.SSLContext | None:
    """The public listener's TLS context under ``mtls``: client certificates required."""
    if config.mode != "mtls":
        return None
    assert config.ca_path and config.cert_path and config.key_path
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=config.ca_path)
    context.load_cert_chain(config.cert_path, config.key_path)
    context.verify_mode = ssl.CERT_REQUIRED
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context
