"""wgml serve through Python's http.client (the standard library's HTTP client, as OpenAI's
SDK speaks it underneath): the responses parsed as JSON, a streamed chat reassembled from
its server-sent events and compared with the same request unstreamed, usage counts, and
concurrent clients from threads each answered as when alone (greedy), random bytes
answered as valid UTF-8.

    python3 tests/serve_client.py <port>

Prints one line per failed check and exits 1 when any failed."""
import http.client
import json
import sys
import threading

port = int(sys.argv[1])
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL [python client] " + what)


def request(method, path, body=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request(method, path, body=json.dumps(body) if body is not None else None,
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, r.getheader("Content-Type"), data


status, ctype, data = request("GET", "/v1/models")
models = json.loads(data)
check(status == 200 and ctype == "application/json", "GET /v1/models: %d %s" % (status, ctype))
check(models["object"] == "list" and models["data"][0]["id"] == "m", "the model list: %r" % models)

chat = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 7}
status, _, data = request("POST", "/v1/chat/completions", chat)
whole = json.loads(data)
check(status == 200 and whole["object"] == "chat.completion", "chat: %d %r" % (status, whole))
choice = whole["choices"][0]
check(choice["message"]["role"] == "assistant" and choice["finish_reason"] in ("stop", "length"),
      "chat choice: %r" % choice)
usage = whole["usage"]
check(usage["completion_tokens"] <= 7 and usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"],
      "chat usage: %r" % usage)

# the same request streamed: events until [DONE], their deltas joined
c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
c.request("POST", "/v1/chat/completions", body=json.dumps(dict(chat, stream=True)))
r = c.getresponse()
check(r.status == 200 and r.getheader("Content-Type") == "text/event-stream", "stream headers: %d" % r.status)
pieces, roles, finish, done = [], 0, None, False
for raw in r.read().decode().split("\n\n"):
    if not raw.strip():
        continue
    check(raw.startswith("data: "), "an event without data: %r" % raw)
    payload = raw[len("data: "):]
    if payload == "[DONE]":
        done = True
        continue
    event = json.loads(payload)
    check(event["object"] == "chat.completion.chunk", "chunk object: %r" % event)
    delta = event["choices"][0]["delta"]
    roles += "role" in delta
    pieces.append(delta.get("content", ""))
    finish = event["choices"][0]["finish_reason"] or finish
c.close()
check(done and roles == 1, "the stream ends with [DONE] (%s) and names the role once (%d)" % (done, roles))
check("".join(pieces) == choice["message"]["content"], "streamed %r, whole %r" % ("".join(pieces), choice["message"]["content"]))
check(finish == choice["finish_reason"], "finish reasons %r and %r" % (finish, choice["finish_reason"]))

# a bad request: a 400 with OpenAI's error object
status, _, data = request("POST", "/v1/completions", {"prompt": "x", "top_p": 2})
error = json.loads(data)["error"]
check(status == 400 and "top_p" in error["message"] and error["code"] == 400, "top_p 2: %d %r" % (status, error))

# 20 clients at once, each answered as when alone
prompts = ["p%d says" % i for i in range(20)]
alone = {}
for p in prompts:
    alone[p] = json.loads(request("POST", "/v1/completions", {"prompt": p, "max_tokens": 6})[2])["choices"][0]["text"]
together = {}


def ask(p):
    together[p] = json.loads(request("POST", "/v1/completions", {"prompt": p, "max_tokens": 6})[2])["choices"][0]["text"]


threads = [threading.Thread(target=ask, args=(p,)) for p in prompts]
for t in threads:
    t.start()
for t in threads:
    t.join()
check(len(together) == 20, "%d of 20 concurrent clients answered" % len(together))
differ = [p for p in prompts if together.get(p) != alone[p]]
check(not differ, "%d concurrent answers differ from the same request alone" % len(differ))

# random bytes (temperature 20 over a byte vocabulary): never valid UTF-8 for long, yet the
# JSON must be, streamed or not; each invalid byte comes back as U+FFFD
wild = {"prompt": "hello", "max_tokens": 48, "temperature": 20, "top_k": 0, "seed": 3}
status, _, data = request("POST", "/v1/completions", wild)
text = json.loads(data.decode("utf-8"))["choices"][0]["text"]
check(status == 200 and "\ufffd" in text, "random bytes: %d %r" % (status, text))
status, _, data = request("POST", "/v1/completions", dict(wild, stream=True))
joined = "".join(json.loads(e[len("data: "):])["choices"][0]["text"] for e in data.decode("utf-8").split("\n\n")
                 if e.startswith("data: {"))
check(joined == text, "random bytes streamed: %r, whole %r" % (joined, text))

print("python client: %d failed" % len(failures))
sys.exit(1 if failures else 0)
