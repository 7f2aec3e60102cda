"""A UDP and TCP fault proxy between real processes on loopback.

Each site gets one proxy port, bound for both UDP and TCP on 127.0.0.1, that
stands for the site's real SWIM port: the site advertises the proxy port and
every GridNetwork seed names proxy ports, so every datagram and every
push-pull connection between two sites crosses the proxy, where `FaultCore`
decides its fate.

The pure core, `FaultCore`, holds the faults (partitioned site pairs, a
datagram loss probability) and decides with the `random.Random` it is given,
so a printed seed replays the same drops. The asyncio adapter, `FaultProxy`,
carries the decisions out:

- UDP is forwarded like a symmetric NAT. A datagram that reaches the proxy
  port of site ``dst`` from site ``src``'s real port is sent to ``dst``'s real
  port *from ``src``'s proxy socket*, so ``dst`` sees it come from ``src``'s
  advertised address and its reply crosses the proxy too. A datagram from an
  unknown source is dropped and counted.
- TCP is piped connection by connection. A connection's origin is found by
  the injected ``tcp_origin`` (the connecting process behind a source port,
  `grid.testing.proc_sockets`); a connection the core refuses is closed at
  once, and starting a partition cuts the open connections it separates.
  Loss applies to datagrams only: TCP retransmits what a lossy link drops.

Counters (`FaultCounters`) say what was delivered and why the rest was not.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any

HOST = "127.0.0.1"
PIPE_CHUNK = 65_536


@dataclass
class FaultCounters:
    """What the proxy did with what it was handed."""

    delivered: int = 0
    partitioned: int = 0
    lost: int = 0
    unknown_source: int = 0
    connections: int = 0
    refused_connections: int = 0
    cut_connections: int = 0


@dataclass
class FaultCore:
    """Which site pairs are cut and how lossy datagrams are; decisions from ``rng``."""

    rng: random.Random
    loss: float = 0.0
    """Probability that a datagram between two reachable sites is dropped."""
    cut: set[frozenset[str]] = field(default_factory=set)
    """Unordered site pairs that cannot reach each other."""
    counters: FaultCounters = field(default_factory=FaultCounters)

    def partition(self, isolated: str, others: Iterable[str]) -> None:
        """Cut ``isolated`` from every site of ``others`` (both directions)."""
        self.cut |= {frozenset((isolated, o)) for o in others if o != isolated}

    def heal(self) -> None:
        """Remove every partition."""
        self.cut.clear()

    def set_loss(self, loss: float) -> None:
        """Drop each datagram with probability ``loss`` (0 to 1)."""
        if not 0.0 <= loss <= 1.0:
            raise ValueError(f"loss must be within [0, 1], not {loss}")
        self.loss = loss

    def reachable(self, src: str | None, dst: str) -> bool:
        """Whether ``src`` may reach ``dst`` at all (an unknown source never may)."""
        return src is not None and frozenset((src, dst)) not in self.cut

    def deliver(self, src: str | None, dst: str) -> bool:
        """Decide one datagram from ``src`` to ``dst``, counting the outcome."""
        if src is None:
            self.counters.unknown_source += 1
            return False
        if not self.reachable(src, dst):
            self.counters.partitioned += 1
            return False
        if self.loss and self.rng.random() < self.loss:
            self.counters.lost += 1
            return False
        self.counters.delivered += 1
        return True

    def admit(self, src: str | None, dst: str) -> bool:
        """Decide one TCP connection from ``src`` to ``dst``, counting the outcome."""
        if self.reachable(src, dst):
            self.counters.connections += 1
            return True
        self.counters.refused_connections += 1
        return False


class _SiteDatagrams(asyncio.DatagramProtocol):
    """The proxy socket standing for one site's UDP port."""

    def __init__(self, proxy: FaultProxy, site: str) -> None:
        self.proxy = proxy
        self.site = site
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.proxy.forward_datagram(data, addr[1], self.site)


@dataclass(eq=False)
class _Pipe:
    src: str
    dst: str
    writers: tuple[asyncio.StreamWriter, asyncio.StreamWriter]


class FaultProxy:
    """Proxy ports for sites' real SWIM ports, obeying a `FaultCore`.

    ``real`` maps each site to its real port, ``listen`` to its proxy port.
    ``tcp_origin`` names the site behind a TCP connection's source port (None
    when unknown: refused).
    """

    def __init__(
        self,
        core: FaultCore,
        real: dict[str, int],
        listen: dict[str, int],
        tcp_origin: Callable[[int, int], str | None],
    ) -> None:
        self.core = core
        self.real = dict(real)
        self.listen = dict(listen)
        self.tcp_origin = tcp_origin
        """Called with (source port, proxy port) of an accepted connection."""
        self._by_real_port = {port: site for site, port in self.real.items()}
        self._udp: dict[str, _SiteDatagrams] = {}
        self._servers: list[asyncio.Server] = []
        self._pipes: set[_Pipe] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.piped: dict[tuple[str, str], int] = {}
        """Connections piped, per (source site, destination site)."""

    def address(self, site: str) -> str:
        """The ``host:port`` that stands for ``site``."""
        return f"{HOST}:{self.listen[site]}"

    async def start(self) -> FaultProxy:
        """Bind every site's proxy port for UDP and TCP."""
        loop = asyncio.get_running_loop()
        for site, port in self.listen.items():
            _, protocol = await loop.create_datagram_endpoint(
                lambda site=site: _SiteDatagrams(self, site),  # type: ignore[misc]
                local_addr=(HOST, port),
            )
            self._udp[site] = protocol
            server = await asyncio.start_server(self._acceptor(site), HOST, port)
            self._servers.append(server)
        return self

    async def stop(self) -> None:
        """Close every socket and connection the proxy holds."""
        for server in self._servers:
            server.close()
        for protocol in self._udp.values():
            if protocol.transport is not None:
                protocol.transport.close()
        for pipe in list(self._pipes):
            self._close(pipe)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for server in self._servers:
            await server.wait_closed()

    def partition(self, isolated: str) -> None:
        """Cut ``isolated`` from every other site, and the connections between them."""
        self.core.partition(isolated, self.listen)
        for pipe in list(self._pipes):
            if not self.core.reachable(pipe.src, pipe.dst):
                self.core.counters.cut_connections += 1
                self._close(pipe)

    def heal(self) -> None:
        """Remove every partition."""
        self.core.heal()

    # -- UDP ---------------------------------------------------------------------

    def forward_datagram(self, data: bytes, source_port: int, dst: str) -> None:
        """A datagram reached ``dst``'s proxy port from ``source_port``."""
        src = self._by_real_port.get(source_port)
        if not self.core.deliver(src, dst):
            return
        assert src is not None
        sender = self._udp[src].transport
        if sender is not None and not sender.is_closing():
            sender.sendto(data, (HOST, self.real[dst]))

    # -- TCP ---------------------------------------------------------------------

    def _acceptor(
        self, dst: str
    ) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Coroutine[Any, Any, None]]:
        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._accept(reader, writer, dst)

        return accept

    async def _accept(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, dst: str
    ) -> None:
        peer = writer.get_extra_info("peername")
        src = self.tcp_origin(int(peer[1]), self.listen[dst]) if peer else None
        if not self.core.admit(src, dst):
            writer.transport.abort()
            return
        assert src is not None
        try:
            up_reader, up_writer = await asyncio.open_connection(HOST, self.real[dst])
        except OSError:
            writer.transport.abort()
            return
        self.piped[src, dst] = self.piped.get((src, dst), 0) + 1
        pipe = _Pipe(src, dst, (writer, up_writer))
        self._pipes.add(pipe)
        tasks = [
            self._spawn(self._copy(reader, up_writer)),
            self._spawn(self._copy(up_reader, writer)),
        ]
        try:
            await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            self._close(pipe, graceful=True)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _copy(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, ConnectionError):
            while chunk := await reader.read(PIPE_CHUNK):
                writer.write(chunk)
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()

    def _close(self, pipe: _Pipe, *, graceful: bool = False) -> None:
        self._pipes.discard(pipe)
        for writer in pipe.writers:
            if graceful:
                writer.close()
            else:
                writer.transport.abort()
