#!/usr/bin/env bash
# Issue 26 prep: what a Llama-2-7B-shaped model (random weights, `--load-format dummy`, nothing
# downloaded or carried but a ~2 MB config + tokenizer directory) costs to start on the lent
# H200, its KV-cache capacity, and a short throughput sanity load. Run ON THE GPU MACHINE from
# the checkout's root, after the recipe's stage0 + install (.gpu/recipe: a GPU recipe not in this repository) and
#   eval "$(bash .gpu/recipe/device.sh env)"
# Sub-commands:
#   model                 write /tmp/model7b (benchmarks/make_7b_shape_model.py)
#   start [STEP...]       run the steps in the background (setsid), log /tmp/res7b/runner.log;
#                         default: graphs_cold eager_cold graphs_warm eager_warm
#   run [STEP...]         the same in the foreground (one call; wrap it in `timeout` so that
#                         `collect` still runs inside the call's limit)
#   wait SECONDS          print progress until the runner is done or SECONDS passed
#   collect               $OUT/summary.md, $OUT/runner.log, $OUT/res7b.tgz (logs, bench JSON);
#                         stops a server left running (e.g. by `timeout` around `run`)
# MODEL7B (default /tmp/model7b) and RES7B (default /tmp/res7b) override the two paths; the
# model directory may also be built elsewhere (it is ~2 MB) and carried.
# A step starts `vllm serve` (max-model-len 4096, gpu-memory-utilization 0.9, bf16, dummy
# weights; `*eager*` steps add --enforce-eager), times /health ready and the first streamed
# completion from the launch, keeps the server log's KV-cache / compile facts, runs its
# `vllm bench serve` loads (random 512 in / 128 out, --ignore-eos, a new seed each so prefix
# caching finds nothing to reuse), and stops the server. torch.compile's cache
# (VLLM_CACHE_ROOT) is empty for the first graphs step only: `graphs_warm` is a restart.
set -uo pipefail
MODEL=${MODEL7B:-/tmp/model7b}
RES=${RES7B:-/tmp/res7b}
NAME=llama2-7b-shape
PORT=8000
SERVE_ARGS="--load-format dummy --dtype bfloat16 --max-model-len 4096 --gpu-memory-utilization 0.9"
mkdir -p "$RES"
stamp() { date -u +%T; }
now() { date +%s.%N; }
since() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$2"; }

first_token() { # T0: time from T0 (epoch s) to the first streamed chunk of a fresh request
  python3 - "$1" "$PORT" "$NAME" <<'EOF'
import http.client, json, sys, time
t0, port, name = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
body = json.dumps({"model": name, "prompt": "Hello, my name is", "max_tokens": 16, "stream": True,
                   "ignore_eos": True, "temperature": 0})
connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
sent = time.time()
connection.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
response = connection.getresponse()
first, chunks = None, 0
for line in response:
    line = line.strip()
    if not line.startswith(b"data:"):
        continue
    data = line[5:].strip()
    if data == b"[DONE]":
        break
    if json.loads(data).get("choices"):
        first = first or time.time()
        chunks += 1
done = time.time()
print(f"first_token_s {first - t0:.2f} request_ttft_ms {(first - sent) * 1e3:.1f} "
      f"chunks {chunks} request_e2e_ms {(done - sent) * 1e3:.1f} status {response.status}")
EOF
}

serve() { # STEP EXTRA_ARGS...: launch, wait for /health, time the first streamed token
  local step=$1; shift
  local log=$RES/server_$step.log t0
  t0=$(now)
  setsid nohup python3 -m vllm.entrypoints.cli.main serve "$MODEL" --served-model-name $NAME \
    --host 127.0.0.1 --port $PORT --disable-uvicorn-access-log $SERVE_ARGS "$@" \
    > "$log" 2>&1 < /dev/null &
  echo $! > $RES/server.pid
  echo "=== $(stamp) $step: vllm serve $SERVE_ARGS $*"
  while ! curl -sf -o /dev/null http://127.0.0.1:$PORT/health; do
    kill -0 "$(cat $RES/server.pid)" 2>/dev/null || { echo "=== $step server DIED"; tail -40 "$log"; return 1; }
    [ "$(since "$t0" "$(now)" | cut -d. -f1)" -gt 420 ] && { echo "=== $step start TIMEOUT"; tail -30 "$log"; return 1; }
    sleep 0.2
  done
  local ready; ready=$(since "$t0" "$(now)")
  local first second
  first=$(first_token "$t0"); second=$(first_token "$(now)")
  echo "$step ready_s $ready $first | second request: $second" | tee -a $RES/startup.txt
  echo "$step gpu_memory_used $(nvidia-smi --query-gpu=memory.used --format=csv,noheader)" | tee -a $RES/startup.txt
  grep -h -E "KV cache|concurrency|blocks|Model loading took|Loading weights took|torch.compile|Dynamo bytecode|Compil|Graph capturing|graph capturing|init engine|max_num_seqs|max_num_batched_tokens|Chunked prefill|Using .* backend|Available KV" \
    "$log" | sed 's/^.*\] //' | head -40 | tee $RES/facts_$step.txt
}

stop_server() {
  local pid; pid=$(cat $RES/server.pid 2>/dev/null) || return 0
  kill -TERM -- -"$pid" 2>/dev/null
  for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  kill -KILL -- -"$pid" 2>/dev/null
  rm -f $RES/server.pid
  for _ in $(seq 1 20); do
    [ "$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)" -lt 2000 ] && break; sleep 1
  done
  echo "=== $(stamp) stopped; GPU memory used $(nvidia-smi --query-gpu=memory.used --format=csv,noheader)"
}

bench() { # TAG SEED [extra bench args]
  local tag=$1 seed=$2; shift 2
  echo "=== $(stamp) bench $tag (seed $seed) $*"
  timeout 240 python3 -m vllm.entrypoints.cli.main bench serve --backend vllm \
    --base-url http://127.0.0.1:$PORT --endpoint /v1/completions --model $NAME --tokenizer "$MODEL" \
    --dataset-name random --random-input-len 512 --random-output-len 128 --num-prompts 200 \
    --request-rate inf --ignore-eos --seed "$seed" --percentile-metrics ttft,tpot,itl,e2el \
    --metric-percentiles 50,90,99 --save-result --result-dir $RES --result-filename "bench_$tag.json" "$@" \
    > "$RES/bench_$tag.log" 2>&1
  local rc=$?
  grep -E "Successful|Benchmark duration|throughput|Mean TTFT|Median TTFT|P99 TTFT|Median TPOT|Median ITL|P99 ITL" \
    "$RES/bench_$tag.log" | tr -s ' '
  [ $rc -ne 0 ] && { echo "bench $tag exit $rc"; tail -20 "$RES/bench_$tag.log"; }
  return 0
}

step() { # STEP
  case $1 in
    graphs_cold) serve "$1" && { bench graphs_inf 1; bench graphs_c32 2 --max-concurrency 32; } ;;
    eager_cold) serve "$1" --enforce-eager && bench eager_inf 3 ;;
    graphs_warm) serve "$1" && bench graphs_warm_inf 4 ;;
    eager_warm) serve "$1" --enforce-eager ;;
    graphs_ref) serve "$1" && { bench graphs_ref400 5 --num-prompts 400; bench graphs_c64 6 --max-concurrency 64; } ;;
    eager_ref) serve "$1" --enforce-eager && bench eager_ref400 7 --num-prompts 400 ;;
    gmu095) serve "$1" --enforce-eager --gpu-memory-utilization 0.95 ;;
    *) echo "=== unknown step $1"; return 0 ;;
  esac
  stop_server
}

run_steps() {
  for s in "$@"; do step "$s"; done
  echo "=== $(stamp) all done"
}

summary() {
  python3 - "$RES" <<'EOF'
import glob, json, os, sys
res = sys.argv[1]
print("| step | ready s | first token s | 1st request TTFT ms | 2nd request TTFT ms |")
print("|---|---|---|---|---|")
for line in open(os.path.join(res, "startup.txt")):
    words = line.split()
    if len(words) > 2 and words[1] == "ready_s":
        values = dict(zip(words[1::2], words[2::2]))
        parts = line.split("second request:")
        second = parts[1].split() if len(parts) > 1 else []
        second_ttft = second[3] if len(second) > 3 else "?"
        print(f"| {words[0]} | {values['ready_s']} | {values.get('first_token_s', '?')} | "
              f"{values.get('request_ttft_ms', '?')} | {second_ttft} |")
print()
print("| load | ok | duration s | req/s | out tok/s | TTFT p50 / p99 ms | TPOT p50 / p99 ms | ITL p50 / p99 ms |")
print("|---|---|---|---|---|---|---|---|")
for path in sorted(glob.glob(os.path.join(res, "bench_*.json"))):
    b = json.load(open(path))
    g = lambda k: b.get(k, float("nan"))
    print(f"| {os.path.basename(path)[6:-5]} | {b.get('completed')} | {g('duration'):.1f} | {g('request_throughput'):.1f} | "
          f"{g('output_throughput'):.0f} | {g('median_ttft_ms'):.0f} / {g('p99_ttft_ms'):.0f} | "
          f"{g('median_tpot_ms'):.1f} / {g('p99_tpot_ms'):.1f} | {g('median_itl_ms'):.1f} / {g('p99_itl_ms'):.1f} |")
EOF
  for f in "$RES"/facts_*.txt; do [ -f "$f" ] && { echo; echo "## $(basename "$f")"; cat "$f"; }; done
  [ -f "$RES/model.json" ] && { echo; echo "## model"; cat "$RES/model.json"; }
}

case ${1:-} in
  model)
    python3 "$(dirname "$0")/make_7b_shape_model.py" "$MODEL" | tee "$RES/model.json"
    python3 -c "from transformers import AutoTokenizer as A; t = A.from_pretrained('$MODEL'); print(type(t).__name__, len(t), t.bos_token_id, t.eos_token_id, repr(t.apply_chat_template([{'role': 'user', 'content': 'hi'}], tokenize=False, add_generation_prompt=True)))"
    ;;
  start)
    shift
    [ -f $RES/runner.pid ] && kill -0 "$(cat $RES/runner.pid)" 2>/dev/null && { echo "already running"; exit 1; }
    cp "$0" $RES/runner.sh  # the checkout may be re-copied while this runs
    [ $# -eq 0 ] && set -- graphs_cold eager_cold graphs_warm eager_warm
    setsid nohup bash $RES/runner.sh _run "$@" >> $RES/runner.log 2>&1 < /dev/null &
    echo $! > $RES/runner.pid
    echo "started $* (pid $!), log $RES/runner.log"
    ;;
  _run) shift; run_steps "$@" ;;
  run)
    shift
    [ $# -eq 0 ] && set -- graphs_cold eager_cold graphs_warm eager_warm
    run_steps "$@" 2>&1 | tee -a $RES/runner.log
    ;;
  wait)
    until_s=$(( $(date +%s) + ${2:-540} ))
    while [ "$(date +%s)" -lt $until_s ]; do
      [ "$(tail -1 $RES/runner.log 2>/dev/null | grep -c 'all done')" -gt 0 ] && break
      sleep 5
    done
    cat $RES/runner.log
    ;;
  collect)
    [ -f $RES/server.pid ] && kill -TERM -- -"$(cat $RES/server.pid)" 2>/dev/null
    summary > $RES/summary.md 2>&1; cat $RES/summary.md
    cp $RES/summary.md $RES/runner.log "$OUT/"
    tar -czf "$OUT/res7b.tgz" -C "$(dirname "$RES")" "$(basename "$RES")" && ls -la "$OUT"
    ;;
  *) echo "usage: $0 model | start [STEP...] | wait SECONDS | collect"; exit 2 ;;
esac
