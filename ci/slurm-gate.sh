#!/usr/bin/env bash
# A sharded gate on a Slurm cluster: one array task per shard, then a merge job that starts when
# every task has ended (whatever their exit status: a failing shard still has a report).
#   bash ci/slurm-gate.sh [SHARDS] [BUDGET]        from the project root on the login node
# Each task runs ci/nightly.sh; cudafuzz takes its shard from SLURM_ARRAY_TASK_ID,
# SLURM_ARRAY_TASK_MIN and SLURM_ARRAY_TASK_COUNT (tasks numbered 1..SHARDS here), and writes
# gate-slurm/shard-<task>/. The merge job writes gate-slurm/merged/ and exits with the merged
# verdict. Adjust the #SBATCH-style options (partition, GPU request) to your cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
shards=${1:-4}
budget=${2:-20m}
base=gate-slurm
mkdir -p "$base"
if [ -x .gpu/bin/cudafuzz ]; then cudafuzz=.gpu/bin/cudafuzz; else cargo build --release --quiet; cudafuzz=target/release/cudafuzz; fi

array_job=$(sbatch --parsable \
  --job-name=cudafuzz-gate --array="1-$shards" \
  --gres=gpu:1 --cpus-per-task=8 --time=01:00:00 \
  --output="$base/shard-%a.log" \
  --export=ALL,CUDAFUZZ_GATE_BUDGET="$budget" \
  --wrap='CUDAFUZZ_GATE_OUT='"$base"'/shard-$SLURM_ARRAY_TASK_ID bash ci/nightly.sh')
echo "submitted array job $array_job ($shards shards, budget $budget)"

merge_job=$(sbatch --parsable \
  --job-name=cudafuzz-gate-merge --dependency="afterany:$array_job" \
  --cpus-per-task=1 --time=00:10:00 --output="$base/merge.log" \
  --wrap="seeds=\$(ls -d $base/shard-*/seeds 2>/dev/null); $cudafuzz report merge --out $base/merged $base/shard-*/report.json \${seeds:+--seeds \$seeds}")
echo "submitted merge job $merge_job (after $array_job): $base/merged/report.md"
