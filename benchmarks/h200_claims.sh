#!/usr/bin/env bash
# Issue 10's claims on the lent GPU machine, run by the suite's own commands, in the
# background (an 8-trial A/B takes ~12-16 min; one device call may last 10 min):
#   bash benchmarks/h200_claims.sh start h200-prefix-caching-ab h200-eager-ab   # returns
#   bash benchmarks/h200_claims.sh wait 560      # progress until done or 560 s passed
#   bash benchmarks/h200_claims.sh collect       # $OUT/claims.tgz (no raw samples) + table
# A tune or experiment longer than one session goes on in the next: `collect` also packs each
# interrupted one with its trials' rows ($OUT/resumable.tgz.part-*, 15 MiB each); carried to a
# fresh machine in a folder of their own,
#   bash benchmarks/h200_claims.sh restore DIR   # unpacks them into /tmp/claims
#   bash benchmarks/h200_claims.sh resume NAME   # `tune --resume /tmp/claims/NAME` (or
#                                                # `run --resume` for an experiment folder)
# and `wait` / `collect` as above. The scenario and its overrides are the folder's own.
# Each scenario is `python3 -m vllm_slo run scenario=NAME` (or `tune` for h200-tune) with
# --runs-dir /tmp/claims; the device's vLLM comes from the recipe (docs/gpu.md), sourced by
# the caller: eval "$(bash .gpu/recipe/device.sh env)". Results go to results/h200/.
# CLAIM_ARGS (optional): overrides appended to every command (e.g. a short trial to try it).
# CLAIMS_END (optional, epoch seconds): the last moment a trial may still be running (leave
#   time for `collect` after it). A watchdog sends the run SIGTERM (the suite stops, keeps the
#   trials done and renders the experiment as interrupted) when a trial starts that would end
#   past CLAIMS_END, a trial's length estimated as the longest gap between trial starts so far
#   leaving out the first (a cold machine's first server starts ~50 s slower), the first gap
#   while it is the only one, CLAIMS_TRIAL_S before the second start (default 150), or when
#   CLAIMS_END passes. Later
#   scenarios in the list are then skipped.
# CLAIMS_DIR (optional): the runs folder instead of /tmp/claims (the script's own test).
# CLAIMS_PYTHON_DIR (optional): run `python3 -m vllm_slo` from this directory (e.g. an exported
#   commit, so another person's uncommitted edits in the checkout do not travel into the run).
set -uo pipefail
CLAIMS=${CLAIMS_DIR:-/tmp/claims}
DRIVER_LOG=$CLAIMS/driver.log
mkdir -p "$CLAIMS"

start() { # SCENARIO...: `run scenario=NAME` (`tune` for h200-tune and *-capacity-tune, a
  # capacity race; `capacity` for another name with -capacity in it), one after another
  local commands=() name command
  for name in "$@"; do
    case $name in
      h200-tune|*-capacity-tune) command=tune ;;  # a tune; the second a capacity race
      *-capacity*) command=capacity ;;
      *) command=run ;;
    esac
    commands+=("$name|$command scenario=$name ${CLAIM_ARGS:-}")
  done
  launch "${commands[@]}"
}

resume() { # RUN_DIR...: folders under $CLAIMS (restored or interrupted) continued: a tune
  # folder (tune.yaml) with `tune --resume`, a capacity search (a folder named *-capacity, whose
  # capacity.json files carry its steps: claims.tgz holds all it needs) with `capacity
  # --resume`, an experiment with `run --resume`; each goes on
  # with its own scenario (CLAIM_ARGS are not applied: --resume takes only credentials)
  local commands=() name command
  for name in "$@"; do
    name=$(basename "$name")
    [ -d "$CLAIMS/$name" ] || { echo "no folder $CLAIMS/$name (restore it first)"; return 2; }
    command=run
    [ -f "$CLAIMS/$name/tune.yaml" ] && command=tune
    case $name in *-capacity) command=capacity ;; esac
    commands+=("$name|$command --resume $CLAIMS/$name")
  done
  launch "${commands[@]}"
}

launch() { # "LABEL|vllm_slo arguments"...: one driver in the background, then the watchdog
  [ -f "$CLAIMS/driver.pid" ] && kill -0 "$(cat $CLAIMS/driver.pid)" 2>/dev/null && {
    echo "already running: $(cat $CLAIMS/driver.pid)"; return 1; }
  local script=$CLAIMS/driver.sh item label arguments
  {
    echo "set -u"
    for item in "$@"; do
      label=${item%%|*}; arguments=${item#*|}
      echo "echo \"=== \$(date -u +%T) $arguments\""
      echo "[ -f $CLAIMS/stop ] && { echo '=== skipped $label: past CLAIMS_END'; echo '=== all done'; exit 0; }"
      echo "(cd ${CLAIMS_PYTHON_DIR:-.} && exec python3 -m vllm_slo --runs-dir $CLAIMS $arguments) &"
      echo "echo \$! > $CLAIMS/run.pid; wait \$!; echo \"=== exit \$? $label\""
    done
    echo "echo '=== all done'"
  } > "$script"
  rm -f "$CLAIMS/stop"
  setsid nohup bash "$script" > "$DRIVER_LOG" 2>&1 < /dev/null &
  echo $! > "$CLAIMS/driver.pid"
  echo "started ${*%%|*} (pid $!), log $DRIVER_LOG"
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

restore() { # PARTS_DIR: the folders a previous session's `collect` packed, into $CLAIMS
  local parts=("$1"/resumable.tgz.part-*)
  [ -f "${parts[0]}" ] || { echo "no resumable.tgz.part-* in $1"; return 2; }
  cat "${parts[@]}" | tar -xzf - -C "$CLAIMS" && ls "$CLAIMS"
}

wait_for() {
  local until=$(( $(date +%s) + ${1:-540} ))
  while [ "$(date +%s)" -lt "$until" ]; do
    grep -q "=== all done" "$DRIVER_LOG" 2>/dev/null && break
    sleep 15
  done
  grep -E "^===|server ready|interrupted|outcome|^step |^capacity|^variant" "$DRIVER_LOG" | tail -40
  nvidia-smi --query-gpu=index,memory.used --format=csv,noheader 2>/dev/null
}

collect() {
  # every experiment/tune folder without the raw rows (samples, plans): HTML + JSON + logs
  tar -czf "$OUT/claims.tgz" -C "$CLAIMS" --exclude='*.arrows' --exclude='samples.parquet' \
    --exclude='requests.parquet' --exclude='samples' . && ls -la "$OUT/claims.tgz"
  cp "$DRIVER_LOG" "$OUT/driver.log"
  # what was cut short goes on in a later session from its folder with the trials' rows
  # (`tune --resume` / `run --resume` re-read them): an interrupted tune (tune.json says so, or
  # none yet) or experiment (stopping.json: interrupted), whole but the raw streams and the
  # HTML pages (each embeds Plotly, ~3.6 MB; re-rendered at the end), in parts of 15 MiB (what
  # one file back from the device may be), for `restore` there
  local resumable=() folder
  for folder in "$CLAIMS"/*/; do
    folder=${folder%/}
    if [ -f "$folder/tune.yaml" ]; then
      grep -qs '"interrupted": false' "$folder/tune.json" || resumable+=("$(basename "$folder")")
    elif grep -qs '"reason": "interrupted"' "$folder/stopping.json"; then
      resumable+=("$(basename "$folder")")
    fi
  done
  if [ "${#resumable[@]}" -gt 0 ]; then
    echo "resumable (packed with their rows): ${resumable[*]}"
    tar -czf - -C "$CLAIMS" --exclude='*.arrows' --exclude='requests.parquet' \
      --exclude='*.html' "${resumable[@]}" | split -b 15M - "$OUT/resumable.tgz.part-" \
      && ls -la "$OUT"/resumable.tgz.part-*
  fi
  for summary in "$CLAIMS"/*-capacity/summary.md; do
    [ -f "$summary" ] && { echo "== $summary"; cat "$summary"; }
  done
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
  resume) shift; resume "$@" ;;
  restore) restore "${2:?a folder holding resumable.tgz.part-*}" ;;
  wait) wait_for "${2:-540}" ;;
  collect) collect ;;
  _watchdog) watchdog "$2" "$3" ;;
  *) echo "usage: $0 start SCENARIO... | resume RUN_DIR... | restore PARTS_DIR | wait SECONDS | collect"
     exit 2 ;;
esac
