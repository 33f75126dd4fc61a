"""A fault-injecting TCP proxy: one per informerd replica between it and the kube-apiserver, so
that the nemesis can cut one replica off from the API server while the others still reach it,
and one in front of each replica's gRPC port, between it and the workers.

Why our own and not Toxiproxy: the faults needed are two (hang every byte both ways with the
connections left open, as a partition does; reset every connection and refuse new ones, as a
restarted load balancer does), the proxy carries TLS through untouched, and it runs on a thread of
the test process with no binary to build or fetch. It forwards bytes; it never parses them.

    proxy = FaultProxy("127.0.0.1", 6443)   # listens on 127.0.0.1:proxy.port
    proxy.set_mode("hang")                  # "pass", "hang" or "reset"
    proxy.upstream = ("127.0.0.1", 7470)    # where new connections go (may be set later)
    proxy.close()
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Literal

Mode = Literal["pass", "hang", "reset"]


class FaultProxy:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream: tuple[str, int] = (upstream_host, upstream_port)
        self.mode: Mode = "pass"
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="proxy")
        self._thread.start()
        self._writers: set[asyncio.StreamWriter] = set()
        self._passing = asyncio.Event()
        self._server = asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(10)
        self.port: int = self._server.sockets[0].getsockname()[1]

    async def _listen(self) -> asyncio.Server:
        self._passing.set()
        return await asyncio.start_server(self._accept, "127.0.0.1", 0)

    def set_mode(self, mode: Mode) -> None:
        """Changes the fault; "reset" also ends every open connection."""

        def apply() -> None:
            self.mode = mode
            if mode == "pass":
                self._passing.set()
            else:
                self._passing.clear()
            if mode == "reset":
                for w in list(self._writers):
                    w.transport.abort()

        self._loop.call_soon_threadsafe(apply)

    def close(self) -> None:
        async def stop() -> None:
            self._server.close()
            for w in list(self._writers):
                w.transport.abort()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.mode == "reset":
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, up_writer}
        try:
            await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))
        finally:
            for w in (writer, up_writer):
                self._writers.discard(w)
                w.transport.abort()

    async def _pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await src.read(65536):
                # Hung: the bytes wait here (and the sender's buffers fill), connections stay.
                await self._passing.wait()
                if self.mode == "reset":
                    break
                dst.write(data)
                await dst.drain()
        dst.transport.abort()
