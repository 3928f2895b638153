#!/usr/bin/env bash
# Issue 10's claims on the lent GPU machine, run by the suite's own commands, in the
# background (an 8-trial A/B takes ~12-16 min; one device call may last 10 min):
#   bash benchmarks/h200_claims.sh start h200-prefix-caching-ab h200-eager-ab   # returns
#   bash benchmarks/h200_claims.sh wait 560      # progress until done or 560 s passed
#   bash benchmarks/h200_claims.sh collect       # $OUT/claims.tgz (no raw samples) + table
# Each scenario is `python3 -m vllm_slo run scenario=NAME` (or `tune` for h200-tune) with
# --runs-dir /tmp/claims; the device's vLLM comes from the recipe (docs/gpu.md), sourced by
# the caller: eval "$(bash .gpu/recipe/device.sh env)". Results go to docs/results/h200/.
# CLAIM_ARGS (optional): overrides appended to every command (e.g. a short trial to try it).
set -uo pipefail
CLAIMS=/tmp/claims
DRIVER_LOG=$CLAIMS/driver.log
mkdir -p "$CLAIMS"

start() {
  [ -f "$CLAIMS/driver.pid" ] && kill -0 "$(cat $CLAIMS/driver.pid)" 2>/dev/null && {
    echo "already running: $(cat $CLAIMS/driver.pid)"; return 1; }
  local script=$CLAIMS/driver.sh
  {
    echo "set -u"
    for name in "$@"; do
      local command=run
      [ "$name" = h200-tune ] && command=tune
      echo "echo \"=== \$(date -u +%T) $command $name\""
      echo "python3 -m vllm_slo --runs-dir $CLAIMS $command scenario=$name ${CLAIM_ARGS:-}; echo \"=== exit \$? $name\""
    done
    echo "echo '=== all done'"
  } > "$script"
  setsid nohup bash "$script" > "$DRIVER_LOG" 2>&1 < /dev/null &
  echo $! > "$CLAIMS/driver.pid"
  echo "started $* (pid $!), log $DRIVER_LOG"
}

wait_for() {
  local until=$(( $(date +%s) + ${1:-540} ))
  while [ "$(date +%s)" -lt "$until" ]; do
    grep -q "=== all done" "$DRIVER_LOG" 2>/dev/null && break
    sleep 15
  done
  grep -E "^===|^=== trial|server ready|interrupted|outcome" "$DRIVER_LOG" | tail -40
  nvidia-smi --query-gpu=index,memory.used --format=csv,noheader 2>/dev/null
}

collect() {
  # every experiment/tune folder without the raw rows (samples, plans): HTML + JSON + logs
  tar -czf "$OUT/claims.tgz" -C "$CLAIMS" --exclude='*.arrows' --exclude='samples.parquet' \
    --exclude='requests.parquet' --exclude='samples' . && ls -la "$OUT/claims.tgz"
  cp "$DRIVER_LOG" "$OUT/driver.log"
  for summary in "$CLAIMS"/*/summary.json; do
    [ -f "$summary" ] || continue
    python3 - "$summary" <<'EOF'
import json, sys
document = json.load(open(sys.argv[1]))
print(sys.argv[1].split("/")[-2], "exit", document.get("exit_code"))
print(document.get("benchstat", ""))
EOF
  done
}

case ${1:-} in
  start) shift; start "$@" ;;
  wait) wait_for "${2:-540}" ;;
  collect) collect ;;
  *) echo "usage: $0 start SCENARIO... | wait SECONDS | collect"; exit 2 ;;
esac
