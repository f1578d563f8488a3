#!/usr/bin/env bash
# Idle and running CPU use of the real memscope window (issue 7 "Idle behaviour"): opens the demo
# paused, lets it settle, and reads the process's CPU time from /proc over --seconds (default 10);
# then the same while it runs at the default 30 steps/s. Prints one JSON line per state. Needs a
# display: run it as  xvfb-run -a -s "-screen 0 1920x1200x24" bench/gui_idle.sh
set -euo pipefail
cd "$(dirname "$0")/.."
GUI=build/app/gui/memscope
[[ -x $GUI ]] || { echo "gui_idle: $GUI is missing; run scripts/setup first" >&2; exit 1; }
SECONDS_TO_MEASURE=10
[[ ${1:-} == --seconds ]] && SECONDS_TO_MEASURE=$2

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }  # utime + stime, in clock ticks

measure() {  # state [memscope args...]
  local state=$1
  shift
  "$GUI" "$@" >/dev/null 2>&1 &
  local pid=$!
  sleep 3  # start-up: model build, first frames
  local t0 w0 t1 w1
  t0=$(cpu_ticks $pid)
  w0=$(date +%s.%N)
  sleep "$SECONDS_TO_MEASURE"
  t1=$(cpu_ticks $pid)
  w1=$(date +%s.%N)
  kill $pid
  wait $pid 2>/dev/null || true
  python3 -c "import json,sys; t=(int(sys.argv[2])-int(sys.argv[1]))/int(sys.argv[5]); w=float(sys.argv[4])-float(sys.argv[3]); \
print(json.dumps({'bench':'gui_idle','state':sys.argv[6],'seconds':round(w,2),'cpu_seconds':round(t,3),'cpu_percent':round(100*t/w,2)}))" \
    "$t0" "$t1" "$w0" "$w1" "$(getconf CLK_TCK)" "$state"
}

measure paused --paused
measure running --speed 30
