#!/bin/bash
# wgml serve through real HTTP clients (curl, and Python's http.client in
# tests/serve_client.py): every endpoint, streaming as server-sent
# events, 50 concurrent clients whose greedy answers equal their answers alone, a full
# queue (503), bad requests (400, 404, 405, 413), a client that disconnects mid-stream
# (its request cancelled, the server going on), and a clean stop on SIGTERM.
#   bash tests/serve_test.sh <path to the wgml program>
set -u
wgml=${1:?usage: serve_test.sh <wgml>}
for tool in curl python3; do
    command -v "$tool" >/dev/null || { echo "serve_test.sh: $tool is missing (scripts/bootstrap.sh installs it)"; exit 2; }
done
work=$(mktemp -d /tmp/wgml_serve_test.XXXXXX)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$work"' EXIT
. "$(dirname "$0")/checks.sh"

# start <log> <flags...>: a server on a free port; sets $port (0 when it did not start)
start() {
    local log=$1
    shift
    "$wgml" serve --model "$work/m" --chat-template chatml --port 0 --temperature 0 "$@" >"$log" 2>&1 &
    pids+=($!)
    port=0
    for _ in $(seq 1 200); do
        port=$(grep -o 'listening on .*127\.0\.0\.1:[0-9]*' "$log" | grep -o '[0-9]*$')
        [ -n "$port" ] && return
        sleep 0.1
    done
    port=0
    bad "the server did not start: $(tail -3 "$log")"
}
# (curl reads a bare host:port as plain HTTP)
# post <path> <json>: the body in $work/body, the status in $status
post() { status=$(curl -s -o "$work/body" -w '%{http_code}' "127.0.0.1:$port$1" -d "$2"); }
# the JSON strings of a field, escapes kept, one per line
strings_of() { grep -oE "\"$1\":\"([^\"\\\\]|\\\\.)*\"" "$2" | sed -E "s/^\"$1\":\"//; s/\"$//"; }

# 1024 positions: long requests run for seconds, so a disconnect or a full queue happens
# while one is running
"$wgml" train --dim 16 --heads 2 --kv-heads 1 --layers 1 --ffn 32 --context 1024 --batch 2 --eval-every 0 --steps 2 \
    --out "$work/m" >/dev/null 2>&1 || { echo "serve_test.sh: wgml train failed"; exit 1; }

case="endpoints"
start "$work/log" --slots 4 --queue 64
curl -s "127.0.0.1:$port/v1/models" >"$work/models"
check 'grep -q "\"id\":\"m\"" "$work/models" && grep -q "\"object\":\"list\"" "$work/models"' "/v1/models: $(cat "$work/models")"
check '[ "$(curl -s "127.0.0.1:$port/health")" = "{\"status\":\"ok\"}" ]' "/health"
post /v1/completions '{"prompt": "Hello", "max_tokens": 5}'
check '[ "$status" = 200 ] && grep -q "\"object\":\"text_completion\"" "$work/body"' "completion: $status $(cat "$work/body")"
check 'grep -q "\"completion_tokens\":5" "$work/body" && grep -q "\"finish_reason\":\"length\"" "$work/body"' \
    "completion usage: $(cat "$work/body")"
post /v1/chat/completions '{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}], "max_tokens": 6}'
check '[ "$status" = 200 ] && grep -q "\"object\":\"chat.completion\"" "$work/body"' "chat: $status $(cat "$work/body")"
strings_of content "$work/body" | tr -d '\n' >"$work/whole"
curl -sN "127.0.0.1:$port/v1/chat/completions" \
    -d '{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}], "max_tokens": 6, "stream": true}' \
    >"$work/sse"
check '[ "$(grep -c "^data: " "$work/sse")" -ge 3 ] && [ "$(grep "^data: " "$work/sse" | tail -1)" = "data: [DONE]" ]' \
    "the stream's events: $(head -c 300 "$work/sse")"
check 'grep -q "chat.completion.chunk" "$work/sse" && [ "$(grep -c "\"role\":\"assistant\"" "$work/sse")" = 1 ]' \
    "chunks, the role in the first only"
strings_of content "$work/sse" | tr -d '\n' >"$work/pieces"
check 'cmp -s "$work/whole" "$work/pieces"' "the streamed pieces differ from the whole answer"
post /v1/completions '{"prompt": "Hello", "max_tokens": 40, "stop": ["oo", "zz"]}'
check '[ "$status" = 200 ] && ! strings_of text "$work/body" | grep -q "oo"' "a stop string: $(cat "$work/body")"

case="bad requests"
post /v1/completions '{"prompt": "x", "max_tokens"'
check '[ "$status" = 400 ] && grep -q "not a JSON object" "$work/body"' "bad JSON: $status"
post /v1/completions '{"prompt": "x", "temperature": -1}'
check '[ "$status" = 400 ] && grep -q "temperature" "$work/body"' "temperature -1: $status"
post /v1/completions '{"prompt": "x", "n": 2}'
check '[ "$status" = 400 ] && grep -q "\"n\|n must" "$work/body"' "n 2: $status $(cat "$work/body")"
post /v1/completions '{"prompt": "x", "stop": ["a", "b", "c", "d", "e"]}'
check '[ "$status" = 400 ]' "five stop strings: $status"
post /v1/completions '{"prompt": 7}'
check '[ "$status" = 400 ] && grep -q "prompt" "$work/body"' "a number as prompt: $status"
post /v1/chat/completions '{"messages": []}'
check '[ "$status" = 400 ] && grep -q "messages" "$work/body"' "no messages: $status"
post /v1/completions "{\"prompt\": \"$(head -c 1100 /dev/zero | tr '\0' 'a')\"}"
check '[ "$status" = 400 ] && grep -q "context" "$work/body"' "a prompt past the context: $status $(cat "$work/body")"
post /v1/nothing '{}'
check '[ "$status" = 404 ]' "unknown route: $status"
check '[ "$(curl -s -o /dev/null -w "%{http_code}" "127.0.0.1:$port/v1/completions")" = 405 ]' "GET on completions"
head -c 1100000 /dev/zero | tr '\0' ' ' >"$work/big"
check '[ "$(curl -s -o /dev/null -w "%{http_code}" "127.0.0.1:$port/v1/completions" --data-binary @"$work/big")" = 413 ]' \
    "a body over 1 MiB"

case="50 concurrent clients"
for i in $(seq 1 50); do
    curl -s "127.0.0.1:$port/v1/completions" -d "{\"prompt\": \"q$i\", \"max_tokens\": 6}" >"$work/c$i" &
done
wait $(jobs -p | grep -v "^${pids[0]}$") 2>/dev/null
lost=0
differ=0
for i in $(seq 1 50); do
    strings_of text "$work/c$i" >"$work/t$i" || lost=$((lost + 1))
    curl -s "127.0.0.1:$port/v1/completions" -d "{\"prompt\": \"q$i\", \"max_tokens\": 6}" >"$work/a$i"
    strings_of text "$work/a$i" >"$work/u$i"
    cmp -s "$work/t$i" "$work/u$i" || differ=$((differ + 1))
done
check '[ "$lost" = 0 ]' "$lost of 50 concurrent requests got no answer"
check '[ "$differ" = 0 ]' "$differ of 50 concurrent answers differ from the same request alone"

case="Python's http.client"
if python3 "$(dirname "$0")/serve_client.py" "$port" >"$work/py" 2>&1; then ok; else bad "$(tail -5 "$work/py")"; fi

case="a client that disconnects"
curl -sN "127.0.0.1:$port/v1/completions" -d '{"prompt": "Hi", "max_tokens": 1000, "stream": true}' >"$work/gone" &
gone=$!
for _ in $(seq 1 100); do [ -s "$work/gone" ] && break; sleep 0.05; done
kill "$gone"
wait "$gone" 2>/dev/null
for _ in $(seq 1 100); do grep -q "ended (cancelled)" "$work/log" && break; sleep 0.1; done
check 'grep -q "ended (cancelled)" "$work/log"' "the disconnected stream's request was not cancelled"
post /v1/completions '{"prompt": "Hello", "max_tokens": 3}'
check '[ "$status" = 200 ]' "a request after the disconnect: $status"

case="SIGTERM"
kill -TERM "${pids[0]}"
for _ in $(seq 1 100); do kill -0 "${pids[0]}" 2>/dev/null || break; sleep 0.1; done
check '! kill -0 "${pids[0]}" 2>/dev/null' "the server did not stop on SIGTERM"
wait "${pids[0]}"
check '[ $? = 0 ] && grep -q "stopping" "$work/log"' "exit status after SIGTERM"

case="a full queue"
start "$work/log2" --slots 1 --queue 0
curl -sN "127.0.0.1:$port/v1/completions" -d '{"prompt": "Hi", "max_tokens": 1000, "stream": true}' >"$work/long" &
for _ in $(seq 1 100); do [ -s "$work/long" ] && break; sleep 0.05; done
post /v1/completions '{"prompt": "x", "max_tokens": 2}'
check '[ "$status" = 503 ] && grep -q "queue is full" "$work/body"' "a request beyond the slots and queue: $status"
kill $(jobs -p | grep -v "^${pids[1]}$") 2>/dev/null   # the long request: its client leaves
wait $(jobs -p | grep -v "^${pids[1]}$") 2>/dev/null
kill -TERM "${pids[1]}"
wait "${pids[1]}"
check '[ $? = 0 ]' "the second server's exit status"

summary
