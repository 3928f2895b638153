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
# CLAIMS_END (optional, epoch seconds): the last moment a trial may still be running (leave
#   time for `collect` after it). A watchdog sends the run SIGTERM (the suite stops, keeps the
#   trials done and renders the experiment as interrupted) when a trial starts that would end
#   past CLAIMS_END, a trial's length estimated as the longest gap between trial starts so far
#   leaving out the first (a cold machine's first server starts ~50 s slower), the first gap
#   while it is the only one, CLAIMS_TRIAL_S before the second start (default 150), or when
#   CLAIMS_END passes. Later
#   scenarios in the list are then skipped.
# CLAIMS_PYTHON_DIR (optional): run `python3 -m vllm_slo` from this directory (e.g. an exported
#   commit, so another person's uncommitted edits in the checkout do not travel into the run).
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
      echo "[ -f $CLAIMS/stop ] && { echo '=== skipped $name: past CLAIMS_END'; echo '=== all done'; exit 0; }"
      echo "(cd ${CLAIMS_PYTHON_DIR:-.} && exec python3 -m vllm_slo --runs-dir $CLAIMS $command scenario=$name ${CLAIM_ARGS:-}) &"
      echo "echo \$! > $CLAIMS/run.pid; wait \$!; echo \"=== exit \$? $name\""
    done
    echo "echo '=== all done'"
  } > "$script"
  rm -f "$CLAIMS/stop"
  setsid nohup bash "$script" > "$DRIVER_LOG" 2>&1 < /dev/null &
  echo $! > "$CLAIMS/driver.pid"
  echo "started $* (pid $!), log $DRIVER_LOG"
  if [ -n "${CLAIMS_END:-}" ]; then
    cp "$0" "$CLAIMS/claims.sh"  # the checkout may be re-copied while this runs
    setsid nohup bash "$CLAIMS/claims.sh" _watchdog "$CLAIMS_END" "${CLAIMS_TRIAL_S:-150}" \
      >> "$CLAIMS/watchdog.log" 2>&1 < /dev/null &
    echo "watchdog: no trial past $(date -u -d @"$CLAIMS_END" +%T) (in $((CLAIMS_END - $(date +%s))) s)"
  fi
}

watchdog() { # END TRIAL_S: SIGTERM the run when a trial starts that cannot end by END
  local end=$1 trial_s=$2 seen=0 last=0 longest=0 gaps=0 count now
  while kill -0 "$(cat "$CLAIMS/driver.pid")" 2>/dev/null; do
    now=$(date +%s)
    count=$(grep -c "^=== trial " "$DRIVER_LOG" 2>/dev/null)
    if [ "${count:-0}" -gt "$seen" ]; then
      if [ "$last" -gt 0 ]; then
        gaps=$((gaps + 1))
        # gap 1 (the cold first trial) stands only until a warm gap replaces it
        if [ "$gaps" -eq 2 ] || [ $((now - last)) -gt "$longest" ]; then longest=$((now - last)); fi
        trial_s=$longest
      fi
      seen=$count; last=$now
      echo "$(date -u +%T) trial start $count; estimate ${trial_s} s; $((end - now)) s left"
      if [ $((now + trial_s)) -gt "$end" ]; then
        echo "$(date -u +%T) stop: trial $count would end past CLAIMS_END"
        touch "$CLAIMS/stop"; kill -TERM "$(cat "$CLAIMS/run.pid")" 2>/dev/null
      fi
    fi
    if [ "$now" -gt "$end" ] && [ ! -f "$CLAIMS/stop" ]; then
      echo "$(date -u +%T) stop: CLAIMS_END passed"
      touch "$CLAIMS/stop"; kill -TERM "$(cat "$CLAIMS/run.pid")" 2>/dev/null
    fi
    sleep 2
  done
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
  _watchdog) watchdog "$2" "$3" ;;
  *) echo "usage: $0 start SCENARIO... | wait SECONDS | collect"; exit 2 ;;
esac
