#!/usr/bin/env bash
# Live drills on the GPU machine. The first call starts the stack (vLLM, exporter, Prometheus,
# Alertmanager); every call runs the drills not yet done while time is left, then sends back
# results. REHEARSE=1 runs the same flow on a CPU with the simulated engine.
set -u -o pipefail
LIMIT=${LIMIT:-585}
DRILLS=${DRILLS:-"healthy batching gpu_shared queue kv_cache"}
S=${S:-$HOME/live}; R=${R:-$HOME/out}; B=$HOME/bin
mkdir -p $R $B
if [ -z "${REHEARSE:-}" ]; then
  source .gpukit/p2/activate.sh || exit 3
  PY=python3
  if [ ! -x $B/prometheus ]; then
    xz -dc .gpukit/bin/prometheus.xz > $B/prometheus && xz -dc .gpukit/bin/prometheus-alertmanager.xz > $B/prometheus-alertmanager && chmod +x $B/prometheus $B/prometheus-alertmanager || exit 4
  fi
  ENGINE="--engine vllm --model $GPUKIT_MODEL --engine-arg load_format=dummy --engine-arg gpu_memory_utilization=0.85 --engine-arg num_gpu_blocks_override=8192"
  MON="--prometheus-bin $B/prometheus --alertmanager-bin $B/prometheus-alertmanager --alertmanager-templates .gpukit/bin/templates"
else
  PY=${PY:-python3}; ENGINE="--engine sim --port-offset ${OFFSET:-32000}"; MON=""
fi
export PYTHONUNBUFFERED=1
echo "== call at $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null)" | tee -a $R/timeline.log
$PY -c "import lab.live.drill, lab.live.cotenant, governor.inference.cli, governor.exporters.cli, governor.controller.cli" || exit 5
if [ ! -f $S/state.json ]; then
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit,compute_mode --format=csv 2>&1 | tee $R/gpu.csv
  if ! $PY -m lab.live start $ENGINE $MON --state $S --slo slo.yaml --classes 2>&1 | tee -a $R/start.log; then
    echo "== start with the spec's classes failed; again without them" | tee -a $R/start.log
    $PY -m lab.live stop --state $S; sleep 3; rm -rf $S
    $PY -m lab.live start $ENGINE $MON --state $S --slo slo.yaml 2>&1 | tee -a $R/start.log || { tar czf $OUT/logs.tgz -C $S logs; cp $R/* $OUT/; exit 6; }
  fi
fi
declare -A NEED=([healthy]=130 [batching]=180 [gpu_shared]=200 [queue]=180 [kv_cache]=200)
for d in $DRILLS; do
  grep -q "\"drill\": \"$d\"" $R/drills.jsonl 2>/dev/null && continue
  left=$((LIMIT - SECONDS))
  if [ $left -lt ${NEED[$d]} ]; then echo "== $d not started: $left s left" | tee -a $R/timeline.log; break; fi
  W=""; [ $d = healthy ] && W="--wait 75"
  timeout $((left - 15)) $PY -m lab.live drill $d --state $S --out $R $W ${DRILL_ARGS:-} 2>&1 | tee -a $R/timeline.log
done
cp $R/* $OUT/
tar czf $OUT/logs.tgz -C $S logs drills state.json deploy 2>/dev/null
if [ -n "${STOP:-}" ]; then
  $PY -m lab.live stop --state $S; sleep 2; tar czf $OUT/tsdb.tgz -C $S prometheus-data
fi
ls -la $OUT; echo "== done after $SECONDS s"
