#!/usr/bin/env python3
"""Clients and one abusive client against an oooi-dns server, with dnspython.

Run by dns/tests/forward_abuse.rs, which starts the test upstream and the
server. Each of --clients clients has its own loopback source address
(127.0.1.N) and asks, every --interval seconds, a name never asked before
under one of the healthy zones (so every query is forwarded). Meanwhile one
client (127.0.2.1) runs --attack:

  none            nothing
  dead-zone       every 0.8 s, three simultaneous queries for random labels
                  under dead.test (whose authority never answers)
  dead-zones      the same, one random label under each of dead1.test,
                  dead2.test and dead3.test (three unrelated dead zones)
  nxdomain-flood  random labels under nx.test (NXDOMAIN), 64 at a time, as
                  fast as answers come
  slow-flood      every 0.8 s, 400 queries for random labels under slow.test
                  (answered by the upstream after its timeout) sent at once,
                  and the same slow name asked again and again

With --warm NAME, one more client (127.0.3.1) asks NAME every 0.1 s (a
name its cache should keep answering); its failures count with the others,
its answers apart (warm_ok).

Prints one JSON object: healthy answers and failures (with the first few
failures described), and what the attacker sent and got.
"""

import argparse
import asyncio
import json
import random
import socket
import string
import time

import dns.asyncquery
import dns.exception
import dns.message
import dns.rcode
import dns.rdatatype

HEALTHY_ZONES = ["ok.test", "ok2.test", "svc.example", "apps.example.org"]
EXPECTED = "203.0.113.9"


def label(n=10):
    return "".join(random.choice(string.ascii_lowercase) for _ in range(n))


class Tally:
    def __init__(self):
        self.ok = 0
        self.failed = 0
        self.failures = []
        self.sent = 0
        self.answers = {}

    def fail(self, what):
        self.failed += 1
        if len(self.failures) < 20:
            self.failures.append(what)


async def healthy_client(i, args, tally, stop_at):
    source = f"127.0.1.{i + 1}"
    seq = 0
    # Spread the clients over the first interval.
    await asyncio.sleep(random.random() * args.interval)
    while time.monotonic() < stop_at:
        seq += 1
        zone = HEALTHY_ZONES[(i + seq) % len(HEALTHY_ZONES)]
        name = f"h{seq}-c{i}.{zone}."
        q = dns.message.make_query(name, dns.rdatatype.A)
        started = time.monotonic()
        try:
            r = await dns.asyncquery.udp(
                q, args.host, port=args.port, source=source, timeout=args.client_timeout
            )
            addrs = [rd.to_text() for rr in r.answer for rd in rr]
            if r.rcode() == dns.rcode.NOERROR and addrs == [EXPECTED]:
                tally.ok += 1
            else:
                tally.fail(f"{name} {dns.rcode.to_text(r.rcode())} {addrs}")
        except dns.exception.Timeout:
            tally.fail(f"{name} no answer in {args.client_timeout}s")
        elapsed = time.monotonic() - started
        await asyncio.sleep(max(0.0, args.interval - elapsed) * (0.8 + 0.4 * random.random()))


async def warm_client(name, args, tally, stop_at):
    while time.monotonic() < stop_at:
        q = dns.message.make_query(name, dns.rdatatype.A)
        try:
            r = await dns.asyncquery.udp(
                q, args.host, port=args.port, source="127.0.3.1", timeout=args.client_timeout
            )
            addrs = [rd.to_text() for rr in r.answer for rd in rr]
            if r.rcode() == dns.rcode.NOERROR and addrs == [EXPECTED]:
                tally.ok += 1
            else:
                tally.fail(f"{name} {dns.rcode.to_text(r.rcode())} {addrs}")
        except dns.exception.Timeout:
            tally.fail(f"{name} no answer in {args.client_timeout}s")
        await asyncio.sleep(0.1)


class Attacker:
    """Sends from one source address; answers are read in the background."""

    def __init__(self, args, tally):
        self.args = args
        self.tally = tally
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.2.1", 0))
        self.sock.setblocking(False)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
        self.pending = {}

    def send(self, name):
        q = dns.message.make_query(name, dns.rdatatype.A)
        try:
            self.sock.sendto(q.to_wire(), (self.args.host, self.args.port))
            self.tally.sent += 1
        except BlockingIOError:
            pass

    async def read(self, stop_at):
        loop = asyncio.get_running_loop()
        while time.monotonic() < stop_at + 3:
            try:
                data = await asyncio.wait_for(loop.sock_recv(self.sock, 4096), 0.5)
            except asyncio.TimeoutError:
                continue
            try:
                r = dns.message.from_wire(data)
            except dns.exception.DNSException:
                continue
            rc = dns.rcode.to_text(r.rcode())
            self.tally.answers[rc] = self.tally.answers.get(rc, 0) + 1

    async def run(self, stop_at):
        reader = asyncio.create_task(self.read(stop_at))
        kind = self.args.attack
        slow_name = f"same.{label()}.slow.test."
        while time.monotonic() < stop_at:
            if kind == "dead-zone":
                for _ in range(3):
                    self.send(f"{label()}.dead.test.")
                await asyncio.sleep(0.8)
            elif kind == "dead-zones":
                for z in ("dead1.test", "dead2.test", "dead3.test"):
                    self.send(f"{label()}.{z}.")
                await asyncio.sleep(0.8)
            elif kind == "nxdomain-flood":
                names = [f"{label()}.nx.test." for _ in range(64)]
                await asyncio.gather(*(self.ask(n) for n in names))
            elif kind == "slow-flood":
                for _ in range(400):
                    self.send(f"{label()}.slow.test.")
                self.send(slow_name)
                await asyncio.sleep(0.8)
            else:
                await asyncio.sleep(0.1)
        await reader

    async def ask(self, name):
        q = dns.message.make_query(name, dns.rdatatype.A)
        self.tally.sent += 1
        try:
            r = await dns.asyncquery.udp(
                q, self.args.host, port=self.args.port, source="127.0.2.2", timeout=2
            )
            rc = dns.rcode.to_text(r.rcode())
        except dns.exception.Timeout:
            rc = "timeout"
        self.tally.answers[rc] = self.tally.answers.get(rc, 0) + 1


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("--server", required=True, help="ip:port")
    p.add_argument("--clients", type=int, default=200)
    p.add_argument("--interval", type=float, default=0.5)
    p.add_argument("--duration", type=float, default=8.0)
    p.add_argument("--client-timeout", type=float, default=3.0)
    p.add_argument(
        "--attack",
        default="none",
        choices=["none", "dead-zone", "dead-zones", "nxdomain-flood", "slow-flood"],
    )
    p.add_argument("--warm", default=None)
    args = p.parse_args()
    args.host, port = args.server.rsplit(":", 1)
    args.port = int(port)
    healthy, attack, warm = Tally(), Tally(), Tally()
    attacker = Attacker(args, attack)
    # The attack starts first, so that every healthy query meets it.
    stop_at = time.monotonic() + args.duration
    attack_task = asyncio.create_task(attacker.run(stop_at))
    await asyncio.sleep(1.0)
    clients = [healthy_client(i, args, healthy, stop_at) for i in range(args.clients)]
    if args.warm:
        clients.append(warm_client(args.warm, args, warm, stop_at))
    await asyncio.gather(*clients)
    await attack_task
    healthy.failed += warm.failed
    healthy.failures += warm.failures
    print(
        json.dumps(
            {
                "ok": healthy.ok,
                "failed": healthy.failed,
                "failures": healthy.failures,
                "warm_ok": warm.ok,
                "attack_sent": attack.sent,
                "attack_answers": attack.answers,
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
