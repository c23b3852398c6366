#!/usr/bin/env python3
"""Measurements for bench/kafka_gateway.sh (the Kafka gateway, issue 14).

    consume --bootstrap B --topic T --records N
        confluent-kafka reads partition 0 from offset 0 until N records;
        prints {"seconds", "records", "bytes"}.
    latency --bootstrap B --topic T --source-log-dir D --kafkalog BIN --count N --rate R
        appends N records at R/s to the source with `kafkalog produce` (each
        value is its send time) while a confluent-kafka consumer reads the
        mirror; prints {"p50_ms", "p99_ms", "max_ms", "received"}.
    idle --bootstrap B --pid P --connections N --seconds S
        opens N connections, each asks ApiVersions once, then idles S
        seconds; prints the gateway process's CPU seconds and RSS change
        over the idle time.
"""

import argparse
import json
import socket
import struct
import subprocess
import sys
import threading
import time


def consume(a):
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": a.bootstrap, "group.id": "bench", "enable.auto.commit": False,
                  "fetch.max.bytes": 52428800, "max.partition.fetch.bytes": 10485760,
                  "queued.max.messages.kbytes": 262144})
    c.assign([TopicPartition(a.topic, 0, 0)])
    n = size = 0
    start = time.perf_counter()
    while n < a.records:
        for m in c.consume(num_messages=10000, timeout=5):
            if m.error():
                raise SystemExit(str(m.error()))
            n += 1
            size += len(m.value() or b"")
        if time.perf_counter() - start > 600:
            raise SystemExit(f"only {n} records after 600 s")
    seconds = time.perf_counter() - start
    c.close()
    print(json.dumps({"seconds": seconds, "records": n, "bytes": size}))


def floor(a):
    """The kernel's floor for serving files over loopback TCP: sendfile(2)
    of every file to a reader that discards (recv_into a 1 MiB buffer), as
    the gateway's plaintext fetch does; the sender's CPU per GiB."""
    import os
    import resource
    import socket
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    pid = os.fork()
    if pid == 0:
        c = socket.create_connection(("127.0.0.1", port))
        buf = bytearray(1 << 20)
        while c.recv_into(buf):
            pass
        os._exit(0)
    conn, _ = srv.accept()
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    sent = 0
    for path in a.files:
        with open(path, "rb") as f:
            sent += conn.sendfile(f)
    conn.close()
    seconds = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    os.waitpid(pid, 0)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    print(json.dumps({"seconds": seconds, "bytes": sent, "cpu_seconds": cpu}))


def latency(a):
    from confluent_kafka import Consumer, TopicPartition, OFFSET_END
    c = Consumer({"bootstrap.servers": a.bootstrap, "group.id": "bench-latency",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    c.assign([TopicPartition(a.topic, 0, OFFSET_END)])
    # Let the consumer reach the end before producing.
    deadline = time.time() + 10
    while time.time() < deadline:
        c.poll(0.2)
        parts = c.position([TopicPartition(a.topic, 0)])
        if parts and parts[0].offset >= 0:
            break
    producer = subprocess.Popen(
        [a.kafkalog, "produce", "--log-dir", a.source_log_dir, "--topic", a.topic,
         "--partition", "0", "--batch-size", "1", "--fsync", "on-roll"],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, bufsize=1)

    def feed():
        for i in range(a.count):
            producer.stdin.write(f"{time.time():.6f}\n")
            producer.stdin.flush()
            time.sleep(1.0 / a.rate)
        producer.stdin.close()

    t = threading.Thread(target=feed)
    t.start()
    lat = []
    deadline = time.time() + a.count / a.rate + 60
    while len(lat) < a.count and time.time() < deadline:
        m = c.poll(0.5)
        if m is None or m.error():
            continue
        lat.append((time.time() - float(m.value().decode())) * 1000)
    t.join()
    producer.wait()
    c.close()
    lat.sort()
    pick = lambda q: round(lat[min(len(lat) - 1, int(q * len(lat)))], 1) if lat else None
    print(json.dumps({"p50_ms": pick(0.50), "p99_ms": pick(0.99), "max_ms": round(lat[-1], 1) if lat else None,
                      "received": len(lat), "sent": a.count}))


def proc_cpu_rss(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime + stime
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))
    return ticks / 100.0, rss


def idle(a):
    host, port = a.bootstrap.rsplit(":", 1)
    before_cpu, before_rss = proc_cpu_rss(a.pid)
    conns = []
    api_versions = struct.pack(">hhih", 18, 0, 1, 5) + b"bench"
    for _ in range(a.connections):
        s = socket.create_connection((host, int(port)))
        s.sendall(struct.pack(">i", len(api_versions)) + api_versions)
        size = struct.unpack(">i", s.recv(4))[0]
        got = 0
        while got < size:
            got += len(s.recv(size - got))
        conns.append(s)
    opened_cpu, opened_rss = proc_cpu_rss(a.pid)
    time.sleep(a.seconds)
    after_cpu, after_rss = proc_cpu_rss(a.pid)
    for s in conns:
        s.close()
    print(json.dumps({"connections": a.connections, "idle_seconds": a.seconds,
                      "cpu_seconds_idle": round(after_cpu - opened_cpu, 3),
                      "cpu_seconds_opening": round(opened_cpu - before_cpu, 3),
                      "rss_kib_before": before_rss, "rss_kib_with_connections": after_rss,
                      "rss_kib_per_connection": round((after_rss - before_rss) / a.connections, 1)}))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("consume")
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--records", type=int, required=True)
    p = sub.add_parser("floor")
    p.add_argument("files", nargs="+")
    p = sub.add_parser("latency")
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--source-log-dir", required=True)
    p.add_argument("--kafkalog", required=True)
    p.add_argument("--count", type=int, default=300)
    p.add_argument("--rate", type=float, default=20)
    p = sub.add_parser("idle")
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--connections", type=int, default=100)
    p.add_argument("--seconds", type=float, default=30)
    a = ap.parse_args()
    {"consume": consume, "floor": floor, "latency": latency, "idle": idle}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
