#!/usr/bin/env python3
"""Load for `wgml serve`: N clients at once (threads, Python's http.client), each one
/v1/completions request for MAX tokens; prints one JSON line with the wall time from the
first request to the last answer, the completion tokens the answers' usage reports, and
their ratio (aggregate tokens/s).

    python3 bench/serve_load.py HOST:PORT N MAX [temperature]
"""
import http.client
import json
import sys
import threading
import time


def one(addr, body, out, errors, i):
    try:
        host, port = addr.rsplit(":", 1)
        c = http.client.HTTPConnection(host, int(port), timeout=600)
        c.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        data = json.loads(r.read())
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {data}")
        out[i] = data["usage"]["completion_tokens"]
    except Exception as e:  # reported once, after every client has ended
        errors.append(f"request {i}: {e}")


def main():
    addr, n, max_tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    temperature = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
    out = [0] * n
    errors = []
    threads = []
    t0 = time.perf_counter()
    for i in range(n):
        body = {"model": "m", "prompt": f"Request {i} asks for a long answer:", "max_tokens": max_tokens,
                "temperature": temperature, "top_p": 0.95 if temperature else 1, "seed": i}
        t = threading.Thread(target=one, args=(addr, body, out, errors, i))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        sys.exit(f"serve_load: {len(errors)} of {n} requests failed; {errors[0]}")
    tokens = sum(out)
    print(json.dumps({"clients": n, "max_tokens": max_tokens, "temperature": temperature, "seconds": round(wall, 3),
                      "completion_tokens": tokens, "tokens_per_s": round(tokens / wall, 1)}))


if __name__ == "__main__":
    main()
