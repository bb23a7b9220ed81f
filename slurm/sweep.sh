#!/usr/bin/env bash
# Weak- and strong-scaling studies on Slurm: submit one job (slurm/minimllm.sbatch) per size and
# repetition, collect one HDF5 file per job into one study directory with a manifest, wait for every
# job with a deadline, then write the report (scripts/report.sh). See docs/SCALING.md.
#
#   slurm/sweep.sh weak   --batch-per-rank B [options]   global batch = B x ranks (same work per rank)
#   slurm/sweep.sh strong [--global-batch B] [options]   one global batch for every size (default: deck's)
#   slurm/sweep.sh collect STUDY_DIR [--deadline S]      wait for a study's jobs, then report
#
# Sizes (one of):
#   --ranks "1 2 4"        one-node mode (default "1 2 4"): every job on one node, `-N 1 -n R`
#   --nodes "1 2 4"        multi-node mode: `-N N --ntasks-per-node R`, N x R ranks; needs
#                          --ranks-per-node R. (A one-node cluster can never run -N 2: use --ranks there.)
# Options:
#   --reps K               repetitions of every size (default 3); submitted round-robin over the sizes
#   --deck FILE            input deck (default inputs/quickstart.yaml)
#   --steps N              steps per run (default: the deck's); the report checks every file has N rows
#   --policy P             layout policy for every run (default: the deck's)
#   --study DIR            the study directory (default runs/<kind>-<UTC date-time>); must not exist yet
#   --launcher L, --srun-mpi M, --gpu-bind MODE, --bin PATH   passed on to slurm/minimllm.sbatch
#   --gpus-per-node G      sbatch --gpus-per-node=G
#   --sbatch "ARGS"        more sbatch arguments for every job, e.g. "-p batch -A proj -t 00:20:00 --exclusive"
#   --deadline S           seconds to wait for all jobs (default 3600); on expiry: list them, exit 1
#   --poll S               seconds between polls of `scontrol show job -o ID` (default 5)
#   --no-wait              submit, write the manifest and return; later: slurm/sweep.sh collect DIR
#
# Waiting polls `scontrol show job -o ID` for JobState (`sbatch --wait` returned 0 for a job cancelled
# while pending). A job slurmctld has already forgotten (MinJobAge) counts as finished when its HDF5
# file is there. Every size is checked with `sbatch --test-only` before anything is submitted.
# Exit codes: 0 every job COMPLETED and the report written; 1 sbatch refused a size, the deadline
# passed, a job did not complete (the others are still reported) or the report failed; 2 invalid
# arguments.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
die() { echo "sweep.sh: error: $*" >&2; exit 2; }
log() { echo "sweep.sh: $*" >&2; }
usage() { awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "${BASH_SOURCE[0]}"; }

positive_int() { [[ $2 =~ ^[1-9][0-9]*$ ]] || die "$1 $2: must be a positive integer"; }
abspath() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }

# job_state ID: the JobState slurmctld reports, or "" when it no longer knows the job
job_state() {
  local out
  out=$(scontrol show job -o "$1" 2>/dev/null) || { echo ""; return 0; }
  sed -n 's/.*\bJobState=\([A-Z_]*\).*/\1/p' <<<"$out"
}

# manifest_jobs DIR: "ID RANKS REP" per job line of DIR/manifest.txt
manifest_jobs() {
  sed -n 's/^job=\([0-9]*\) ranks=\([0-9]*\) nodes=[0-9]* rep=\([0-9]*\).*/\1 \2 \3/p' "$1/manifest.txt"
}

# collect DIR DEADLINE POLL: wait for every job of the study, then report; exit code as above
collect() {
  local dir=$1 deadline=$2 poll=$3
  [ -f "$dir/manifest.txt" ] || die "$dir: no manifest.txt (not a study directory written by slurm/sweep.sh)"
  local -a ids=()
  local id ranks rep
  while read -r id ranks rep; do ids+=("$id"); done < <(manifest_jobs "$dir")
  ((${#ids[@]})) || die "$dir/manifest.txt: no job= lines"
  local end=$(($(date +%s) + deadline)) pending state failed=0 last=""  # failed: jobs not COMPLETED
  log "waiting for ${#ids[@]} job(s) of $dir (deadline ${deadline} s)"
  while :; do
    pending=()
    for id in "${ids[@]}"; do
      state=$(job_state "$id")
      case $state in
        PENDING|RUNNING|CONFIGURING|COMPLETING|SUSPENDED|REQUEUED|RESIZING|SIGNALING|STAGE_OUT|"REQUEUE_"*)
          pending+=("$id") ;;
      esac
    done
    ((${#pending[@]})) || break
    if [ "$(date +%s)" -ge "$end" ]; then
      log "deadline of ${deadline} s passed; still pending or running: ${pending[*]}"
      log "cancel them with: scancel ${pending[*]}; or wait longer: slurm/sweep.sh collect $dir"
      return 1
    fi
    if [ "${#pending[@]}" != "$last" ]; then log "${#pending[@]} job(s) not finished yet"; last=${#pending[@]}; fi
    sleep "$poll"
  done
  local -a missing=()
  while read -r id ranks rep; do
    state=$(job_state "$id")
    local files=("$dir"/*-"$id".h5)
    if [ -z "$state" ]; then
      if [ -e "${files[0]}" ]; then state="COMPLETED?"; else state="UNKNOWN"; fi
      log "job $id (ranks $ranks, rep $rep): slurmctld no longer knows it; HDF5 file: ${files[0]}"
    fi
    case $state in
      COMPLETED|"COMPLETED?") ;;
      *) failed=$((failed + 1)); missing+=("$id")
         local logs=("$dir"/*-"$id".out)
         log "job $id (ranks $ranks, rep $rep) ended $state: see ${logs[0]}" ;;
    esac
  done < <(manifest_jobs "$dir")
  if ((failed == ${#ids[@]})); then
    log "none of the ${#ids[@]} job(s) completed: no report"
    return 1
  fi
  local report_args=("$dir" --out "$dir/report")
  ((failed == 0)) || report_args+=(--allow-missing)
  if ! "$repo/scripts/report.sh" "${report_args[@]}"; then
    log "the report failed (see above)"
    return 1
  fi
  if ((failed)); then log "job(s) ${missing[*]} did not complete; report of the rest: $dir/report/report.md"; return 1; fi
  log "all ${#ids[@]} job(s) completed; report: $dir/report/report.md"
}

# ---- command line ------------------------------------------------------------------------------------
kind=${1:-}
case $kind in
  weak|strong) shift ;;
  collect)
    shift
    (($#)) || die "collect needs a study directory"
    dir=$1; shift
    deadline=3600 poll=5
    while (($#)); do
      case $1 in
        --deadline) (($# >= 2)) || die "--deadline needs a value"; positive_int "$1" "$2"; deadline=$2; shift 2 ;;
        --poll) (($# >= 2)) || die "--poll needs a value"; positive_int "$1" "$2"; poll=$2; shift 2 ;;
        *) die "collect: unknown option '$1' (valid: --deadline S, --poll S)" ;;
      esac
    done
    collect "$dir" "$deadline" "$poll"
    exit $? ;;
  -h|--help) usage; exit 0 ;;
  *) die "first argument '${kind}': must be weak, strong, collect or --help" ;;
esac

ranks_list="" nodes_list="" ranks_per_node="" reps=3 deck=inputs/quickstart.yaml steps="" policy=""
study="" batch_per_rank="" global_batch="" gpus_per_node="" sbatch_extra="" deadline=3600 poll=5 wait=1
bin=build/src/minimllm
pass=()  # options passed on to minimllm.sbatch as they are
command_line="slurm/sweep.sh $kind $*"
while (($#)); do
  opt=$1
  case $opt in
    --no-wait) wait=0; shift; continue ;;
    -h|--help) usage; exit 0 ;;
  esac
  (($# >= 2)) || die "$opt needs a value (see slurm/sweep.sh --help)"
  val=$2; shift 2
  case $opt in
    --ranks) ranks_list=$val ;;
    --nodes) nodes_list=$val ;;
    --ranks-per-node) positive_int "$opt" "$val"; ranks_per_node=$val ;;
    --reps) positive_int "$opt" "$val"; reps=$val ;;
    --deck) deck=$val ;;
    --steps) positive_int "$opt" "$val"; steps=$val ;;
    --policy) [ "$val" != all ] || die "--policy all: a study runs one policy; submit one study per policy"
              policy=$val ;;
    --study) study=$val ;;
    --batch-per-rank) positive_int "$opt" "$val"; batch_per_rank=$val ;;
    --global-batch) positive_int "$opt" "$val"; global_batch=$val ;;
    --launcher|--srun-mpi|--gpu-bind) pass+=("$opt" "$val") ;;
    --bin) bin=$val ;;
    --gpus-per-node) positive_int "$opt" "$val"; gpus_per_node=$val ;;
    --sbatch) sbatch_extra=$val ;;
    --deadline) positive_int "$opt" "$val"; deadline=$val ;;
    --poll) positive_int "$opt" "$val"; poll=$val ;;
    *) die "unknown option '$opt' (see slurm/sweep.sh --help)" ;;
  esac
done

if [ "$kind" = weak ]; then
  [ -n "$batch_per_rank" ] || die "weak scaling needs --batch-per-rank B (global batch = B x ranks)"
  [ -z "$global_batch" ] || die "--global-batch: weak scaling sets it from --batch-per-rank; use one of them"
else
  [ -z "$batch_per_rank" ] || die "--batch-per-rank: strong scaling keeps one global batch; use --global-batch"
fi
[ -z "$nodes_list" ] || [ -z "$ranks_list" ] || die "--ranks and --nodes: give one (one-node or multi-node mode)"
if [ -n "$nodes_list" ]; then
  [ -n "$ranks_per_node" ] || die "--nodes needs --ranks-per-node R"
  sizes=$nodes_list
else
  [ -z "$ranks_per_node" ] || die "--ranks-per-node goes with --nodes (one-node mode takes --ranks)"
  sizes=${ranks_list:-1 2 4}
fi
read -r -a sizes <<<"$sizes"
((${#sizes[@]})) || die "no sizes given"
for s in "${sizes[@]}"; do positive_int "a size in --ranks/--nodes" "$s"; done
[ -f "$deck" ] || die "--deck $deck: no such file"
[ -x "$bin" ] || die "--bin $bin: not an executable file (build it with scripts/build.sh, or pass --bin)"
command -v sbatch >/dev/null || die "sbatch not found: this needs a Slurm cluster (or scripts/local-slurm.sh start)"
read -r -a sbatch_args <<<"$sbatch_extra"

# size_alloc SIZE: sets nodes, ranks and alloc (the sbatch allocation arguments) for one size
size_alloc() {
  if [ -n "$nodes_list" ]; then
    nodes=$1 ranks=$(($1 * ranks_per_node))
    alloc=(-N "$nodes" --ntasks-per-node "$ranks_per_node")
  else
    nodes=1 ranks=$1
    alloc=(-N 1 -n "$ranks")
  fi
  [ -z "$gpus_per_node" ] || alloc+=(--gpus-per-node="$gpus_per_node")
  alloc+=("${sbatch_args[@]}")
}

# Every size must be one the cluster accepts before anything is submitted (no half-submitted studies).
for size in "${sizes[@]}"; do
  size_alloc "$size"
  if ! out=$(sbatch --test-only "${alloc[@]}" "$repo/slurm/minimllm.sbatch" 2>&1); then
    log "sbatch refuses $ranks ranks on $nodes node(s) (${alloc[*]}): ${out##*$'\n'}"
    log "nothing submitted; choose sizes this cluster can run"
    exit 1
  fi
done

study=${study:-runs/$kind-$(date -u +%Y%m%d-%H%M%S)}
if [ -e "$study/manifest.txt" ]; then die "--study $study: already holds a study (manifest.txt); choose a new directory"; fi
mkdir -p "$study"
study=$(cd "$study" && pwd)
deck=$(abspath "$deck")
bin=$(abspath "$bin")

manifest=$study/manifest.txt
{
  echo "# minimllm scaling study, written by slurm/sweep.sh; read by scripts/report.py."
  echo "# key=value lines (an empty value: the deck's), then one line per job:"
  echo "# job=ID ranks=R nodes=N rep=K global_batch=B (or deck: the deck's data.global_batch)"
  echo "kind=$kind"
  echo "mode=$([ -n "$nodes_list" ] && echo multi-node || echo one-node)"
  echo "deck=$deck"
  echo "steps=$steps"
  echo "policy=$policy"
  echo "batch_per_rank=$batch_per_rank"
  echo "global_batch=$global_batch"
  echo "reps=$reps"
  echo "bin=$bin"
  echo "created=$(date -u +%FT%TZ)"
  echo "submit_host=$(hostname)"
  echo "git_commit=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "command=$command_line"
} >"$manifest"

submitted=0
for ((rep = 1; rep <= reps; rep++)); do
  for size in "${sizes[@]}"; do
    size_alloc "$size"
    batch=${global_batch:-deck}
    [ -z "$batch_per_rank" ] || batch=$((batch_per_rank * ranks))
    run_args=(--deck "$deck" --out-dir "$study" --bin "$bin" "${pass[@]}")
    [ -z "$steps" ] || run_args+=(--steps "$steps")
    [ -z "$policy" ] || run_args+=(--policy "$policy")
    [ "$batch" = deck ] || run_args+=(--global-batch "$batch")
    name="mllm-$kind-n$ranks-rep$rep"
    if ! out=$(sbatch --parsable --job-name="$name" --output="$study/%x-%j.out" "${alloc[@]}" \
      "$repo/slurm/minimllm.sbatch" "${run_args[@]}" 2>&1); then
      log "sbatch failed for $ranks ranks on $nodes node(s), rep $rep: $out"
      log "the $submitted job(s) already submitted are in $manifest (scancel them, or collect them)"
      exit 1
    fi
    id=${out%%;*}
    [[ $id =~ ^[0-9]+$ ]] || { log "sbatch printed '$out', not a job id"; exit 1; }
    echo "job=$id ranks=$ranks nodes=$nodes rep=$rep global_batch=$batch" >>"$manifest"
    submitted=$((submitted + 1))
    log "submitted job $id: $ranks ranks on $nodes node(s), rep $rep, global batch $batch"
  done
done
log "$submitted job(s) in $study"
if ((wait == 0)); then
  log "not waiting (--no-wait); later: slurm/sweep.sh collect $study"
  exit 0
fi
collect "$study" "$deadline" "$poll"
