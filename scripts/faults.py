#!/usr/bin/env python3
"""Hostile clients for scripts/load.sh, against a server on loopback only. Every loop is
bounded in count and time. Subcommands print one JSON line of results.

  slowloris ADDR PROBE_URL PID N SECONDS   N idle TCP connections (no TLS hello), N/4 TLS
                                           connections that never finish their headers,
                                           while a legitimate client keeps asking
  nested ADDR BODY_FILE_PREFIX             deeply nested and huge JSON: status and time
  chunked ADDR PID N MIB SECONDS           N concurrent chunked uploads of MIB each
  rss PID                                  VmRSS and VmHWM in KiB
"""
import json
import os
import socket
import ssl
import sys
import threading
import time


def loopback(addr):
    host, port = addr.rsplit(":", 1)
    assert host in ("127.0.0.1", "localhost", "[::1]"), "loopback only"
    return host.strip("[]"), int(port)


def tls_context():
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def rss(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS", "VmHWM")):
                k, v = line.split(":")
                out[k] = int(v.split()[0])
    out["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    return out


def post(addr, path, body, timeout=10.0, chunked=False):
    """One HTTPS/1.1 request on a fresh connection; (status, seconds)."""
    host, port = loopback(addr)
    start = time.monotonic()
    with socket.create_connection((host, port), timeout=timeout) as raw:
        with tls_context().wrap_socket(raw, server_hostname="localhost") as s:
            head = f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nConnection: close\r\n"
            if chunked:
                s.sendall((head + "Transfer-Encoding: chunked\r\n\r\n").encode())
                step = 64 * 1024
                for i in range(0, len(body), step):
                    part = body[i:i + step]
                    try:
                        s.sendall(b"%x\r\n" % len(part) + part + b"\r\n")
                    except OSError:
                        break
                else:
                    s.sendall(b"0\r\n\r\n")
            else:
                s.sendall((head + f"Content-Length: {len(body)}\r\n\r\n").encode())
                try:
                    s.sendall(body)
                except OSError:
                    pass
            data = b""
            try:
                while b"\r\n" not in data:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    data += chunk
            except OSError:
                pass
    status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/") else 0
    return status, time.monotonic() - start


def slowloris(addr, probe_body, pid, n, seconds):
    host, port = loopback(addr)
    stop = time.monotonic() + seconds
    held, tls_held = [], []
    for _ in range(n):
        try:
            held.append(socket.create_connection((host, port), timeout=5))
        except OSError:
            break
    for _ in range(n // 4):
        if time.monotonic() > stop - seconds / 2:
            break  # slots are full: handshakes wait for the idle peers to time out
        try:
            s = tls_context().wrap_socket(socket.create_connection((host, port), timeout=1), server_hostname="localhost")
            s.sendall(b"POST /mutate HTTP/1.1\r\nHost: localhost\r\n")  # never finished
            tls_held.append(s)
        except OSError:
            break
    latencies, statuses, peak = [], {}, rss(pid)
    while time.monotonic() < stop:
        try:
            status, took = post(addr, "/validate", probe_body, timeout=15)
        except OSError as e:
            status, took = type(e).__name__, 0.0
        statuses[str(status)] = statuses.get(str(status), 0) + 1
        latencies.append(took)
        now = rss(pid)
        peak = {k: max(peak[k], now[k]) for k in peak}
        time.sleep(0.2)
    closed = 0
    for s in held + tls_held:
        try:
            s.settimeout(0.01)
            if s.recv(1) == b"":
                closed += 1
        except (socket.timeout, ssl.SSLWantReadError):
            pass
        except OSError:
            closed += 1
        s.close()
    latencies.sort()
    latencies = latencies or [0.0]
    after, took_after = post(addr, "/validate", probe_body)
    return {"idle_tcp": len(held), "partial_headers": len(tls_held),
            "closed_by_server": closed, "probe_statuses": statuses,
            "probe_p50_s": round(latencies[len(latencies) // 2], 3), "probe_max_s": round(latencies[-1], 3),
            "after_status": after, "after_s": round(took_after, 3), "server_peak": peak}


def nested(addr):
    results = {}
    cases = {
        "nested_100k_arrays": b"[" * 100_000 + b"]" * 100_000,
        "nested_100k_objects": b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
        "string_2900k": b'{"request":"' + b"x" * (2_900_000) + b'"}',
        "array_of_1m_numbers": b"[" + b"1," * 1_000_000 + b"1]",
        "over_limit_4m": b" " * (4 * 1024 * 1024),
    }
    for name, body in cases.items():
        times = []
        for _ in range(5):
            status, took = post(addr, "/mutate", body)
            times.append(took)
        results[name] = {"bytes": len(body), "status": status, "best_ms": round(min(times) * 1e3, 1),
                         "worst_ms": round(max(times) * 1e3, 1)}
    return results


def chunked(addr, pid, n, mib, seconds):
    body = b'{"request":"' + b"x" * (mib * 1024 * 1024 - 20) + b'"}'
    stop = time.monotonic() + seconds
    statuses, lock, peak = {}, threading.Lock(), rss(pid)
    base = dict(peak)

    def worker():
        while time.monotonic() < stop:
            try:
                status, _ = post(addr, "/mutate", body, timeout=30, chunked=True)
            except OSError as e:
                status = type(e).__name__
            with lock:
                statuses[str(status)] = statuses.get(str(status), 0) + 1

    threads = [threading.Thread(target=worker) for _ in range(n)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        now = rss(pid)
        peak = {k: max(peak[k], now[k]) for k in peak}
        time.sleep(0.05)
    return {"clients": n, "body_mib": mib, "statuses": statuses,
            "rss_before_kib": base["VmRSS"], "rss_peak_kib": peak["VmRSS"], "hwm_kib": rss(pid)["VmHWM"]}


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "slowloris":
        addr, body_file, pid, n, secs = args
        out = slowloris(addr, open(body_file, "rb").read(), int(pid), int(n), float(secs))
    elif cmd == "nested":
        out = nested(args[0])
    elif cmd == "chunked":
        addr, pid, n, mib, secs = args
        out = chunked(addr, int(pid), int(n), int(mib), float(secs))
    elif cmd == "rss":
        out = rss(int(args[0]))
    else:
        raise SystemExit(__doc__)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
