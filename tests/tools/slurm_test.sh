#!/usr/bin/env bash
# A real one-host Slurm (Debian's slurm-wlm and munge; no systemd): the test makes a munge key and
# a slurm.conf in a temp dir, starts munged, slurmctld and slurmd itself, then runs
#  1. the example data-parallel with `srun -n2` (ranks from SLURM_PROCID/SLURM_NTASKS),
#  2. tools/slurm/fashion_mnist.sbatch with `sbatch --wait` (one node, 2 tasks, quick flags),
#  3. an elastic job: `srun -n1 paddlerun --nproc=2 --min-nproc=1 ... --elastic`, one worker
#     SIGKILLed mid-run; the job must go on and exit 0,
# checks each one's JSON line and exit status, and stops the daemons. Skips (exit 0, saying why)
# only when the packages are missing or the daemons cannot start here.
#
#   slurm_test.sh LAUNCH SBATCH_SCRIPT
set -uo pipefail
export PATH="$PATH:/usr/sbin:/sbin"
launch=$(realpath "$1")
sbatch_script=$(realpath "$2")
example=$(realpath "${TEST_SRCDIR:-$launch.runfiles}/paddle/examples/fashion_mnist")
for tool in munged mungekey slurmctld slurmd srun sbatch sinfo; do
  command -v "$tool" >/dev/null ||
    { echo "SKIP: $tool is not installed (tools/install-deps: slurm-wlm, munge)"; exit 0; }
done
# Under /tmp, not TEST_TMPDIR: a unix socket path must fit in 108 bytes, and munged wants every
# directory above its socket searchable by all.
work=$(mktemp -d /tmp/paddle-slurm.XXXXXX)
chmod 755 "$work"  # munged refuses a socket directory others may write
export SLURM_CONF=$work/slurm.conf
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
quick=(--model=mlp --epochs=1 --train-samples=4000 --test-samples=1000 --threads=1)

stop_daemons() {
  local f pid
  for f in slurmd slurmctld munged; do
    pid=$(cat "$work/$f.pid" 2>/dev/null) || continue
    kill "$pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
  done
  rm -rf "$work"
}
trap stop_daemons EXIT
fail() {
  echo "FAIL: $*"
  for f in slurmctld.log slurmd.log munged.log; do
    echo "--- $f"; tail -n 15 "$work/$f" 2>/dev/null
  done
  exit 1
}

mungekey -c -k "$work/munge.key" || { echo "SKIP: mungekey cannot make a key here"; exit 0; }
munged --force -S "$work/munge.socket" --key-file="$work/munge.key" \
  --pid-file="$work/munged.pid" --log-file="$work/munged.log" --seed-file="$work/munged.seed" ||
  { echo "SKIP: munged does not start here:"; tail -n 5 "$work/munged.log"; exit 0; }
port=$((20000 + RANDOM % 20000))
mkdir -p "$work/state" "$work/spool"
touch "$work/plugstack.conf"
cat >"$work/slurm.conf" <<EOF
ClusterName=paddletest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
AuthInfo=socket=$work/munge.socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
PlugStackConfig=$work/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=localhost NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
slurmctld -c -f "$SLURM_CONF" || { echo "SKIP: slurmctld does not start here"; exit 0; }
slurmd -N localhost -f "$SLURM_CONF" || { echo "SKIP: slurmd does not start here"; exit 0; }
for _ in $(seq 100); do
  [[ $(sinfo -h -o %t 2>/dev/null) == idle ]] && break
  sleep 0.2
done
[[ $(sinfo -h -o %t 2>/dev/null) == idle ]] ||
  { echo "SKIP: the Slurm node never became idle:"; sinfo; tail -n 5 "$work/slurmd.log"; exit 0; }
echo "slurm up: $(sinfo -h -o '%P %a %D %t %N')"

json_of() { grep -h '^{"epoch"' "$@" | tail -n 1; }

# 1. srun: two tasks, the ranks from Slurm's environment.
out=$(MASTER_ADDR=127.0.0.1 MASTER_PORT=$((port + 2)) timeout 180 \
  srun -N1 -n2 --kill-on-bad-exit=1 "$example" "${quick[@]}" 2>&1)
status=$?
echo "$out" | tail -n 3
[[ $status -eq 0 ]] || fail "srun exited $status: $out"
grep -q '"world_size": 2' <<<"$out" || fail "srun: no JSON line with world_size 2"
echo "PASS srun"

# 2. The batch script, one node instead of its two (command-line options win over #SBATCH).
(cd "$work" && PADDLE_BIN=$example timeout 240 sbatch --wait -N1 --ntasks-per-node=2 \
  --cpus-per-task=1 --output="$work/batch-%j.out" "$sbatch_script" "${quick[@]}" \
  >"$work/sbatch.out" 2>&1)
status=$?
cat "$work"/batch-*.out 2>/dev/null | tail -n 3
[[ $status -eq 0 ]] ||
  fail "sbatch --wait exited $status: $(cat "$work/sbatch.out" "$work"/batch-*.out)"
json_of "$work"/batch-*.out | grep -q '"world_size": 2' ||
  fail "sbatch: no JSON line with world_size 2"
ls "$work"/checkpoints/*/ckpt-* >/dev/null 2>&1 ||
  fail "sbatch: the script's --checkpoint-dir is empty"
echo "PASS sbatch"

# 3. Elastic under Slurm: one launcher per node (here one), a worker killed mid-run: a moment
# after the first generation starts training, so that the kill comes early in the job's 2,504
# steps, however fast they go.
timeout 240 srun -N1 -n1 --cpus-per-task=2 "$launch" --nproc=2 --min-nproc=1 --max-restarts=2 \
  "$example" --elastic --commit-every=5 --model=mlp --epochs=8 --train-samples=20000 \
  --test-samples=1000 --batch=64 >"$work/elastic.out" 2>&1 &
job=$!
for _ in $(seq 300); do
  grep -q "generation 0: world size 2" "$work/elastic.out" && break
  sleep 0.1
done
sleep 0.2
# Rank 0 of the first generation names its pid.
victim=$(sed -n 's/.*generation 0: world size 2.*rank 0 is pid \([0-9]*\).*/\1/p' \
  "$work/elastic.out")
[[ -n $victim ]] || fail "elastic: no first generation of 2: $(cat "$work/elastic.out")"
kill -9 "$victim" ||
  fail "elastic: rank 0 (pid $victim) had exited before the kill: $(cat "$work/elastic.out")"
wait "$job"
status=$?
tail -n 4 "$work/elastic.out"
[[ $status -eq 0 ]] || fail "elastic srun exited $status: $(tail -n 30 "$work/elastic.out")"
grep "elastic: recovered at step" "$work/elastic.out" ||
  fail "elastic: no recovery after the kill"
grep -q '"membership_changes"' "$work/elastic.out" || fail "elastic: no JSON line"
echo "PASS elastic srun"
echo PASS
