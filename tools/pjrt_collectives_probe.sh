#!/usr/bin/env bash
# tools/pjrt_collectives_probe.sh - does the PJRT plugin run a StableHLO
# all_reduce across rank processes? (tools/pjrt_collectives_probe.c)
#   bash tools/pjrt_collectives_probe.sh [nranks=2]
# Plugin: TORCH_TPU_PJRT_PLUGIN, else the one torch_tpu/pjrt.py finds (TPU,
# CUDA, XLA:CPU). Starts nranks processes (node_id=k num_nodes=n; XLA:CPU
# also cpu_device_count=1), prints each rank's output; exit 0 when every
# rank printed PASS. PROBE_OPTS="name=int ..." replaces the extra options
# (e.g. PROBE_OPTS=cpu_device_count=2: XLA:CPU then runs both replicas in
# each process and sums only that process's inputs).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
N=${1:-2}
PLUGIN=${TORCH_TPU_PJRT_PLUGIN:-$($PY -c "
import importlib.util, os, sys
spec = importlib.util.spec_from_file_location('p', 'torch_tpu/pjrt.py')
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
f = m.discover(); print(next((f[k] for k in ('tpu', 'cuda', 'cpu') if k in f), ''))")}
[ -n "$PLUGIN" ] || { echo "no PJRT plugin found (pip install xla-cpu-pjrt)"; exit 1; }
INC=$($PY -c "import os,importlib.util as u;s=u.find_spec('xla_plugins.xla_cpu_pjrt');print(os.path.join(os.path.dirname(s.origin),'include') if s else '')" 2>/dev/null)
[ -f "$INC/pjrt_c_api.h" ] || { echo "pjrt_c_api.h not found (pip install xla-cpu-pjrt)"; exit 1; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cc -std=c17 -O1 -Wall -Wextra -Werror -isystem "$INC" tools/pjrt_collectives_probe.c -ldl \
  -o "$T/probe" || exit 1
mkdir "$T/kv"
EXTRA=()
case "$(basename "$PLUGIN")" in *cpu*) EXTRA=(cpu_device_count=1) ;; esac
[ -n "${PROBE_OPTS+x}" ] && read -r -a EXTRA <<<"$PROBE_OPTS"
echo "plugin: $PLUGIN, $N ranks"
PIDS=()
for ((k = 0; k < N; k++)); do
  timeout 120 "$T/probe" "$PLUGIN" $k $N "$T/kv" node_id=$k num_nodes=$N "${EXTRA[@]}" \
    >"$T/out$k" 2>"$T/err$k" &
  PIDS+=($!)
done
RC=0
for ((k = 0; k < N; k++)); do wait ${PIDS[$k]} || RC=1; done
for ((k = 0; k < N; k++)); do
  cat "$T/out$k"
  grep -v -e '^WARNING: All log messages' -e '^$' "$T/err$k" | tail -3
done
exit $RC
