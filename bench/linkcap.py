#!/usr/bin/env python3
"""Measure what the emulated link really delivers, independent of S3 and of any client.

One process is both ends: a sink/source server on --listen and N client streams that
connect through --via (the toxiproxy proxy in front of --listen). Bytes are counted at
the *receiving* end after a warm-up, so toxiproxy's and the kernel's buffers are not
counted as throughput.

  up    clients send, server counts        -> upload MB/s   (1 MB = 10^6 bytes)
  down  server sends, clients count        -> download MB/s
  rtt   1-byte ping-pong on one stream     -> median round trip in ms
        (--load N: while N streams download, i.e. RTT including queueing on a busy link)

Prints one number on stdout (MB/s or ms); details on stderr.
"""
import argparse
import asyncio
import socket
import statistics
import sys
import time

BUF = bytes(1 << 20)  # 1 MiB of zeros; content does not matter (nothing compresses it)


def small_rcvbuf(w):
    # Receivers keep little unread data in the kernel: if this process is descheduled (busy
    # machine), a backlog read later would be counted in the wrong window. The hop to
    # toxiproxy has ~0 RTT, so 256 KiB does not limit the rate.
    w.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 18)


async def main(a):
    got = [0]  # bytes received by whichever side receives
    stop = asyncio.Event()

    async def recv(r):
        while not stop.is_set():
            d = await r.read(1 << 18)
            if not d:
                return
            got[0] += len(d)

    async def send(w):
        while not stop.is_set():
            w.write(BUF)
            await w.drain()

    async def serve(r, w):
        try:  # first byte says what this connection wants: u(pload) d(ownload) e(cho)
            kind = await r.readexactly(1)
            if kind == b"u":
                small_rcvbuf(w)
                await recv(r)
            elif kind == b"d":
                await send(w)
            else:
                while d := await r.read(64):
                    w.write(d)
                    await w.drain()
        except (OSError, asyncio.IncompleteReadError, asyncio.CancelledError):
            # OSError: also the kernel's timeout of a stream the shaper starved (slow).
            pass
        finally:
            w.close()

    lh, lp = a.listen.rsplit(":", 1)
    server = await asyncio.start_server(serve, lh, int(lp))
    vh, vp = a.via.rsplit(":", 1)

    async def dial(kind, streams):
        conns = []
        for _ in range(streams):
            r, w = await asyncio.open_connection(vh, int(vp))
            if kind == b"d":
                small_rcvbuf(w)
            w.write(kind)
            conns.append((r, w))
        return conns

    if a.mode == "rtt":
        load = await dial(b"d", a.load)
        tasks = [asyncio.create_task(recv(r)) for r, _ in load]
        if load:
            await asyncio.sleep(a.warmup)
        (r, w), = await dial(b"e", 1)
        samples = []
        for _ in range(a.pings):
            t = time.perf_counter()
            w.write(b"x")
            await w.drain()
            await r.readexactly(1)
            samples.append((time.perf_counter() - t) * 1000)
        stop.set()
        for t in tasks:
            t.cancel()
        for _, lw in load + [(r, w)]:
            lw.close()
        server.close()
        print(f"rtt ms with {a.load} streams loading the down link: min {min(samples):.1f} "
              f"median {statistics.median(samples):.1f} max {max(samples):.1f}", file=sys.stderr)
        print(f"{statistics.median(samples):.1f}")
        return

    async def keep(kind):
        # A stream the link resets is dialled again, as any client would: on the lossy
        # profile (2 % of connections reset after 3 s) streams that stayed dead made the
        # link look a quarter slower than it is (76.7 MB/s of 100 in one run).
        while not stop.is_set():
            try:
                (r, w), = await dial(kind, 1)
            except OSError:
                await asyncio.sleep(0.1)
                continue
            try:
                await (send(w) if kind == b"u" else recv(r))
            except (OSError, asyncio.IncompleteReadError):
                pass
            finally:
                w.close()

    tasks = [asyncio.create_task(keep(a.mode[0].encode())) for _ in range(a.streams)]
    await asyncio.sleep(a.warmup)  # skip slow start, tbf burst and toxiproxy pipeline fill
    b0, t0 = got[0], time.perf_counter()
    samples = []
    while (el := time.perf_counter() - t0) < a.secs:
        await asyncio.sleep(1)
        samples.append(got[0])
    el = time.perf_counter() - t0
    rate = (got[0] - b0) / el / 1e6
    stop.set()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    server.close()
    per_s = [(y - x) / 1e6 for x, y in zip([b0] + samples, samples)]
    print(f"{a.mode} {a.streams} streams: {rate:.1f} MB/s over {el:.1f}s "
          f"(per-second {', '.join(f'{x:.0f}' for x in per_s)})", file=sys.stderr)
    print(f"{rate:.1f}")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["up", "down", "rtt"])
    p.add_argument("--via", default="127.0.0.1:9001", help="proxy address clients dial")
    p.add_argument("--listen", default="127.0.0.1:9101", help="where the proxy forwards to")
    p.add_argument("--streams", type=int, default=32)
    p.add_argument("--secs", type=float, default=10)
    p.add_argument("--warmup", type=float, default=2)
    p.add_argument("--pings", type=int, default=10)
    p.add_argument("--load", type=int, default=0, help="rtt: download streams running meanwhile")
    try:
        asyncio.run(main(p.parse_args()))
    except KeyboardInterrupt:
        sys.exit(130)
