#!/usr/bin/env bash
# As it ran on 2026-12-07 for the fd32b4d matrix (docs/drills.md, "The score"), on a borrowed
# 16-core machine with Python 3.12 and numpy but no network. Prepared here: .simrun/whl held the
# wheel built from the checkout (git archive HEAD; pip wheel --no-deps) and its dependencies
# (pip download --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 ...),
# .simrun/prometheus.xz and alertmanager.xz Debian's binaries (xz -9), .simrun/templates
# Alertmanager's templates from /usr/share/prometheus/alertmanager. Run: bash THIS default|stock
# One spec's matrix (default | stock), or the deadline gate's refusal timing (refusals);
# what comes back is copied to $OUT. ($HOME/gk keeps the wheels for a later GPU call.)
set -u
R=$HOME/simout; mkdir -p $R $HOME/simbin $HOME/gk /usr/share/prometheus/alertmanager
MODE=${1:-default}
if [ ! -x $HOME/simbin/prometheus ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target $HOME/simsite .simrun/whl/*.whl || exit 3
  xz -dc .simrun/prometheus.xz > $HOME/simbin/prometheus && xz -dc .simrun/alertmanager.xz > $HOME/simbin/prometheus-alertmanager && chmod +x $HOME/simbin/* || exit 4
  cp -r .simrun/templates/* /usr/share/prometheus/alertmanager/
  mkdir -p $HOME/gk/simwhl $HOME/gk/templates && cp .simrun/whl/*.whl $HOME/gk/simwhl/ && cp -r .simrun/templates/. $HOME/gk/templates/
fi
export PATH=$HOME/simbin:$PATH PYTHONPATH=$PWD:$HOME/simsite PYTHONUNBUFFERED=1
echo "== $(date -u +%FT%TZ) $(nproc) cores, mode $MODE" | tee $R/env-$MODE.log
python3 -c "import numpy, aiohttp, yaml, governor.drills.cli; print('imports ok')" 2>&1 | tee -a $R/env-$MODE.log
(while true; do echo "$(date -u +%T) $(cut -d' ' -f1-4 /proc/loadavg)"; sleep 10; done > $R/load-$MODE.log) &
LOADPID=$!
case $MODE in
  default) python3 -m governor drill all --seeds ${SEEDS:-1,2,3} --parallel 45 --out $R/default --start-by 60 > $R/default.log 2>&1 ;;
  stock) python3 -m governor drill all --seeds ${SEEDS:-1,2,3} --parallel 45 --slo examples/stock-vllm/slo.yaml --port-base 30000 --out $R/stock --start-by 60 > $R/stock.log 2>&1 ;;
  refusals) for rate in ${RATES:-35 70}; do python3 -m lab.overload.refusals --rate $rate --seconds 30 > $OUT/refusals-$rate.txt 2>&1; done ;;
esac
kill $LOADPID
if [ $MODE != refusals ]; then
  cp $R/$MODE/drills.jsonl $OUT/$MODE-drills.jsonl
  python3 -m governor drill all --summarize $R/$MODE > $OUT/$MODE-score.txt 2>&1
  cp $R/$MODE.log $OUT/
  tar czf $OUT/$MODE-logs.tgz -C $R --exclude='*-data' $MODE 2>/dev/null
fi
cp $R/load-$MODE.log $R/env-$MODE.log $OUT/
cat $OUT/*score.txt $OUT/refusals-*.txt 2>/dev/null | tail -60
echo "== done after $SECONDS s"
