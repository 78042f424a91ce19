#!/usr/bin/env bash
# GPU machine: stock `vllm serve` (vLLM 0.25, Governor's middleware) with the real exporter,
# Prometheus, Alertmanager and the controller; the lab's live drills on the stock-vLLM spec
# (examples/stock-vllm/slo.yaml: kubernetes.server vllm, so the verdict reads vLLM's series).
set -u -o pipefail
LIMIT=${LIMIT:-570}
DRILLS=${DRILLS:-"healthy batching gpu_shared queue kv_cache"}
S=$HOME/live; R=$HOME/out; mkdir -p $R
source $HOME/gk/act.sh || exit 3
SLO=examples/stock-vllm/slo.yaml
echo "== call at $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null), $(git rev-parse --short HEAD 2>/dev/null)" | tee -a $R/timeline.log
python3 -c "import lab.live.drill, lab.live.cotenant, governor.exporters.cli, governor.controller.cli, vllm.entrypoints.cli.main" || exit 5
if [ ! -f $S/state.json ]; then
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit,power.default_limit,compute_mode --format=csv 2>&1 | tee $R/gpu.csv
  python3 -m lab.live start --engine vllm --server vllm --model $GPUKIT_MODEL --state $S --slo $SLO \
    --engine-arg load_format=dummy --engine-arg gpu_memory_utilization=0.85 --engine-arg num_gpu_blocks_override=8192 \
    --prometheus-bin $HOME/simbin/prometheus --alertmanager-bin $HOME/simbin/prometheus-alertmanager \
    --alertmanager-templates $HOME/gk/templates 2>&1 | tee -a $R/start.log || { tar czf $OUT/logs.tgz -C $S logs; cp $R/* $OUT/; exit 6; }
  echo "== started after $SECONDS s" | tee -a $R/timeline.log
fi
declare -A NEED=([healthy]=125 [batching]=150 [gpu_shared]=150 [queue]=150 [kv_cache]=170)
for d in $DRILLS; do
  grep -q "\"drill\": \"$d\"" $R/drills.jsonl 2>/dev/null && continue
  left=$((LIMIT - SECONDS))
  if [ $left -lt ${NEED[$d]} ]; then echo "== $d not started: $left s left" | tee -a $R/timeline.log; break; fi
  W=""; [ $d = healthy ] && W="--wait 75"
  timeout $((left - 15)) python3 -m lab.live drill $d --state $S --out $R $W 2>&1 | tee -a $R/timeline.log
done
cp $R/* $OUT/ 2>/dev/null
tar czf $OUT/logs.tgz -C $S logs drills state.json deploy 2>/dev/null
ls -la $OUT; echo "== done after $SECONDS s"
