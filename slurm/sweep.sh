#!/usr/bin/env bash
# Weak- and strong-scaling studies on Slurm: submit one job (slurm/minimllm.sbatch) per size and
# repetition, each writing one HDF5 file into one study directory with a manifest, and a report job that
# Slurm starts once all of them have ended (--dependency=afterany:...) to write the report
# (slurm/sweep.sh collect, scripts/report.sh). Then wait for the report job with a deadline, or return at
# once (--no-wait): the report comes either way. See docs/SCALING.md.
#
#   slurm/sweep.sh weak   --batch-per-rank B [options]   global batch = B x ranks (same work per rank)
#   slurm/sweep.sh strong [--global-batch B] [options]   one global batch for every size (default: deck's)
#   slurm/sweep.sh collect STUDY_DIR [--deadline S] [--poll S] [--env-hook FILE]
#                                                        wait for a study's jobs, then report
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
#   --sbatch "ARGS"        more sbatch arguments for every job, e.g. "-p batch -A proj --exclusive"
#   --time T               walltime of every job (sbatch --time=T: minutes, MM:SS, HH:MM:SS, D-HH[:MM[:SS]])
#   --time-per-size "S=T ..."  walltime per size S (a value of --ranks, or of --nodes in multi-node mode),
#                          e.g. "1=02:00:00 2=01:10:00 4=00:40:00"; sizes not named take --time, else the
#                          partition's default. Either comes after --sbatch's arguments, so it wins.
#   --env-hook FILE        bash file every job sources first (slurm/minimllm.sbatch --env-hook), and the
#                          report job too (module load ...; default: $MINIMLLM_ENV_HOOK, else none)
#   --report-sbatch "ARGS" sbatch arguments of the report job (default: those of --sbatch); it always
#                          gets -N 1 -n 1 and --time (--report-time)
#   --report-time T        the report job's walltime (default 00:30:00)
#   --no-report-job        no report job: wait for the jobs here and report (or with --no-wait, `collect`)
#   --deadline S           seconds to wait (default 3600); on expiry: list what is left, exit 1
#   --poll S               seconds between polls of `scontrol show job -o ID` (default 5)
#   --no-wait              submit, write the manifest and return (the report job writes the report;
#                          without one: slurm/sweep.sh collect DIR)
#   --dry-run              print the sbatch command lines that would be submitted (a shell script on
#                          stdout), and exit 0: nothing is submitted or created, Slurm is not asked
#
# Paths (--deck, --bin, --study, --env-hook) are made absolute when sweep.sh runs, relative to the current
# directory, so the jobs do not depend on where they run.
# Waiting polls `scontrol show job -o ID` for JobState (`sbatch --wait` returned 0 for a job cancelled
# while pending): the report job's, or with --no-report-job every job's. A job slurmctld has already
# forgotten (MinJobAge) counts as finished when its HDF5 file is there. Every size is checked with
# `sbatch --test-only` before anything is submitted.
# Exit codes: 0 every job COMPLETED and the report written (or, with --no-wait, every job submitted);
# 1 sbatch refused a size, the deadline passed, a job did not complete (the others are still reported),
# the report failed, or the report job did not complete; 2 invalid arguments.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
die() { echo "sweep.sh: error: $*" >&2; exit 2; }
log() { echo "sweep.sh: $*" >&2; }
usage() { awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "${BASH_SOURCE[0]}"; }

positive_int() { [[ $2 =~ ^[1-9][0-9]*$ ]] || die "$1 $2: must be a positive integer"; }
abspath() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
# walltime OPTION VALUE: VALUE must be a time sbatch --time takes
walltime() {
  [[ $2 =~ ^([0-9]+-[0-9]+(:[0-9]+(:[0-9]+)?)?|[0-9]+(:[0-9]+(:[0-9]+)?)?)$ ]] ||
    die "$1 '$2': not a walltime (minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS)"
}
# quote WORD...: the words as one shell command line (POSIX quoting, so it pastes into sh and bash)
quote() {
  local word out="" sq="'\\''"
  for word in "$@"; do
    if [[ $word =~ ^[A-Za-z0-9_@%+=:,./-]+$ ]]; then out+=" $word"; else out+=" '${word//\'/$sq}'"; fi
  done
  printf '%s\n' "${out# }"
}
# env_hook_file OPTION FILE: FILE made absolute; an error naming it if it is not a file
env_hook_file() {
  local file
  file=$(abspath "$2")
  [ -f "$file" ] || die "$1$file: no such file (the environment hook to source)"
  echo "$file"
}

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

# collect DIR DEADLINE POLL [HOOK]: wait for every job of the study, source HOOK, report; exit code as above
collect() {
  local dir=$1 deadline=$2 poll=$3 hook=${4:-}
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
  if [ -n "$hook" ]; then
    log "sourcing the environment hook $hook"
    local hook_status
    set +eu
    # shellcheck disable=SC1090
    source "$hook"
    hook_status=$?
    set -eu
    ((hook_status == 0)) || { log "--env-hook $hook: returned $hook_status; no report"; return 1; }
  fi
  if ! "$repo/scripts/report.sh" "${report_args[@]}"; then
    log "the report failed (see above)"
    return 1
  fi
  if ((failed)); then log "job(s) ${missing[*]} did not complete; report of the rest: $dir/report/report.md"; return 1; fi
  log "all ${#ids[@]} job(s) completed; report: $dir/report/report.md"
}

# wait_report_job ID DEADLINE POLL: wait for the report job of the study in $study, show its log; 0 if it
# completed (every job COMPLETED and the report written), 1 otherwise or on the deadline
wait_report_job() {
  local id=$1 deadline=$2 poll=$3 state last=""
  local end=$(($(date +%s) + deadline)) log_file="$study/mllm-$kind-report-$1.out"
  log "waiting for report job $id, which starts when every job has ended (deadline ${deadline} s)"
  while :; do
    state=$(job_state "$id")
    case $state in
      PENDING|RUNNING|CONFIGURING|COMPLETING|SUSPENDED|REQUEUED|RESIZING|SIGNALING|STAGE_OUT|"REQUEUE_"*) ;;
      *) break ;;
    esac
    if [ "$(date +%s)" -ge "$end" ]; then
      log "deadline of ${deadline} s passed; report job $id is $state"
      log "it will still write $study/report when the jobs end; or: scancel $id and slurm/sweep.sh collect $study"
      return 1
    fi
    if [ "$state" != "$last" ]; then log "report job $id: $state"; last=$state; fi
    sleep "$poll"
  done
  [ ! -f "$log_file" ] || sed 's/^/  | /' "$log_file" >&2
  if [ -z "$state" ]; then  # forgotten by slurmctld (MinJobAge): its log's last line says how it ended
    if tail -n 1 "$log_file" 2>/dev/null | grep -q 'job(s) completed; report:'; then state=COMPLETED; else state=UNKNOWN; fi
  fi
  if [ "$state" != COMPLETED ]; then
    log "report job $id ended $state: see $log_file (slurm/sweep.sh collect $study reports again)"
    return 1
  fi
  log "report job $id completed; report: $study/report/report.md"
}

# ---- command line ------------------------------------------------------------------------------------
kind=${1:-}
case $kind in
  weak|strong) shift ;;
  collect)
    shift
    (($#)) || die "collect needs a study directory"
    dir=$1; shift
    deadline=3600 poll=5 hook=""
    while (($#)); do
      case $1 in
        --deadline) (($# >= 2)) || die "--deadline needs a value"; positive_int "$1" "$2"; deadline=$2; shift 2 ;;
        --poll) (($# >= 2)) || die "--poll needs a value"; positive_int "$1" "$2"; poll=$2; shift 2 ;;
        --env-hook) (($# >= 2)) || die "--env-hook needs a value"; hook=$(env_hook_file "--env-hook " "$2"); shift 2 ;;
        *) die "collect: unknown option '$1' (valid: --deadline S, --poll S, --env-hook FILE)" ;;
      esac
    done
    collect "$dir" "$deadline" "$poll" "$hook"
    exit $? ;;
  -h|--help) usage; exit 0 ;;
  *) die "first argument '${kind}': must be weak, strong, collect or --help" ;;
esac

ranks_list="" nodes_list="" ranks_per_node="" reps=3 deck=inputs/quickstart.yaml steps="" policy=""
study="" batch_per_rank="" global_batch="" gpus_per_node="" sbatch_extra="" deadline=3600 poll=5 wait=1
bin=build/src/minimllm time_all="" time_table="" report_job=1 report_sbatch="" report_sbatch_given=0
report_time=00:30:00 dry_run=0
env_hook=${MINIMLLM_ENV_HOOK:-} hook_from=MINIMLLM_ENV_HOOK=
pass=()  # options passed on to minimllm.sbatch as they are
command_line="slurm/sweep.sh $kind $*"
while (($#)); do
  opt=$1
  case $opt in
    --no-wait) wait=0; shift; continue ;;
    --no-report-job) report_job=0; shift; continue ;;
    --dry-run) dry_run=1; shift; continue ;;
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
    --time) walltime "$opt" "$val"; time_all=$val ;;
    --time-per-size) time_table=$val ;;
    --env-hook) env_hook=$val hook_from="--env-hook " ;;
    --report-sbatch) report_sbatch=$val report_sbatch_given=1 ;;
    --report-time) walltime "$opt" "$val"; report_time=$val ;;
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
[ -z "$env_hook" ] || env_hook=$(env_hook_file "$hook_from" "$env_hook")
declare -A time_of=()  # size -> walltime, from --time-per-size
for entry in $time_table; do
  [[ $entry =~ ^([1-9][0-9]*)=(.+)$ ]] || die "--time-per-size: '$entry': expected SIZE=TIME, e.g. 4=00:30:00"
  size=${BASH_REMATCH[1]} value=${BASH_REMATCH[2]}
  walltime "--time-per-size $size=" "$value"
  [[ " ${sizes[*]} " == *" $size "* ]] || die "--time-per-size: '$entry': $size is not a size of this sweep (${sizes[*]})"
  time_of[$size]=$value
done
((dry_run)) || command -v sbatch >/dev/null ||
  die "sbatch not found: this needs a Slurm cluster (or scripts/local-slurm.sh start; --dry-run needs none)"
read -r -a sbatch_args <<<"$sbatch_extra"
((report_sbatch_given)) || report_sbatch=$sbatch_extra
read -r -a report_sbatch_args <<<"$report_sbatch"

study=${study:-runs/$kind-$(date -u +%Y%m%d-%H%M%S)}
if [ -e "$study/manifest.txt" ]; then die "--study $study: already holds a study (manifest.txt); choose a new directory"; fi
study=$(abspath "$study")
deck=$(abspath "$deck")
bin=$(abspath "$bin")
hook_args=()
[ -z "$env_hook" ] || hook_args=(--env-hook "$env_hook")

# job_spec SIZE REP: sets nodes, ranks, job_time, batch, name, alloc (the sbatch allocation arguments) and
# run_args (slurm/minimllm.sbatch's) for one job
job_spec() {
  if [ -n "$nodes_list" ]; then
    nodes=$1 ranks=$(($1 * ranks_per_node))
    alloc=(-N "$nodes" --ntasks-per-node "$ranks_per_node")
  else
    nodes=1 ranks=$1
    alloc=(-N 1 -n "$ranks")
  fi
  [ -z "$gpus_per_node" ] || alloc+=(--gpus-per-node="$gpus_per_node")
  alloc+=("${sbatch_args[@]}")
  job_time=${time_of[$1]:-$time_all}
  [ -z "$job_time" ] || alloc+=(--time="$job_time")
  batch=${global_batch:-deck}
  [ -z "$batch_per_rank" ] || batch=$((batch_per_rank * ranks))
  name="mllm-$kind-n$ranks-rep$2"
  run_args=(--deck "$deck" --out-dir "$study" --bin "$bin" "${hook_args[@]}" "${pass[@]}")
  [ -z "$steps" ] || run_args+=(--steps "$steps")
  [ -z "$policy" ] || run_args+=(--policy "$policy")
  [ "$batch" = deck ] || run_args+=(--global-batch "$batch")
}

# preview: what slurm/minimllm.sbatch would run in the job of job_spec (its --dry-run, JOBID for the id);
# exit 2 with its error if it refuses the arguments
preview() {
  local out
  if ! out=$(SLURM_NTASKS=$ranks SLURM_JOB_NAME=$name SLURM_SUBMIT_DIR=$PWD SLURM_JOB_ID="" \
    bash "$repo/slurm/minimllm.sbatch" --dry-run "${run_args[@]}" 2>&1); then
    die "slurm/minimllm.sbatch refuses the arguments of $name: ${out##*minimllm.sbatch: error: }"
  fi
  printf '%s\n' "$out"
}

# Before anything is submitted (no half-submitted studies): the batch script takes every job's arguments,
# and the cluster accepts every size.
for size in "${sizes[@]}"; do
  job_spec "$size" 1
  preview >/dev/null
  ((dry_run)) && continue
  if ! out=$(sbatch --test-only "${alloc[@]}" "$repo/slurm/minimllm.sbatch" 2>&1); then
    log "sbatch refuses $ranks ranks on $nodes node(s) (${alloc[*]}): ${out##*$'\n'}"
    log "nothing submitted; choose sizes this cluster can run"
    exit 1
  fi
done
if ((dry_run == 0 && report_job)) &&
  ! out=$(sbatch --test-only "${report_sbatch_args[@]}" -N 1 -n 1 --time="$report_time" --wrap=true 2>&1); then
  log "sbatch refuses the report job (${report_sbatch_args[*]} -N 1 -n 1 --time=$report_time): ${out##*$'\n'}"
  log "nothing submitted; fix --report-sbatch or --report-time, or pass --no-report-job"
  exit 1
fi

if ((dry_run)); then
  # The submissions below as a shell script: job ids become $jobN; under each job, as comments, what its
  # batch script would run (JOBID: its id).
  echo "# slurm/sweep.sh $kind --dry-run: nothing submitted; study $study (manifest.txt not written)"
fi
manifest=$study/manifest.txt
((dry_run)) || mkdir -p "$study"
((dry_run)) || {
  echo "# minimllm scaling study, written by slurm/sweep.sh; read by scripts/report.py."
  echo "# key=value lines (an empty value: the deck's), then one line per job:"
  echo "# job=ID ranks=R nodes=N rep=K global_batch=B (or deck: the deck's data.global_batch) time=T (or"
  echo "# default: the partition's); then report_job=ID, the job that writes report/ once they have ended"
  echo "kind=$kind"
  echo "mode=$([ -n "$nodes_list" ] && echo multi-node || echo one-node)"
  echo "deck=$deck"
  echo "steps=$steps"
  echo "policy=$policy"
  echo "batch_per_rank=$batch_per_rank"
  echo "global_batch=$global_batch"
  echo "reps=$reps"
  echo "bin=$bin"
  echo "env_hook=$env_hook"
  echo "created=$(date -u +%FT%TZ)"
  echo "submit_host=$(hostname)"
  echo "git_commit=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "command=$command_line"
} >"$manifest"

# submit WHAT SBATCH-ARGUMENTS...: submits (or with --dry-run prints as jobN=$(sbatch ...)) one job; sets id
submit() {
  local what=$1 out; shift
  if ((dry_run)); then
    local arg line="sbatch --parsable"
    for arg in "$@"; do  # the dependency names earlier lines' $jobN: left unquoted
      case $arg in --dependency=*) line+=" $arg" ;; *) line+=" $(quote "$arg")" ;; esac
    done
    id="\$job$((submitted + 1))"
    echo "job$((submitted + 1))=\$($line)"
    return 0
  fi
  if ! out=$(sbatch --parsable "$@" 2>&1); then
    log "sbatch failed for $what: $out"
    log "the $submitted job(s) already submitted are in $manifest (scancel them, or collect them)"
    exit 1
  fi
  id=${out%%;*}
  [[ $id =~ ^[0-9]+$ ]] || { log "sbatch printed '$out', not a job id"; exit 1; }
}

submitted=0 ids=()
for ((rep = 1; rep <= reps; rep++)); do
  for size in "${sizes[@]}"; do
    job_spec "$size" "$rep"
    submit "$ranks ranks on $nodes node(s), rep $rep" --job-name="$name" --output="$study/%x-%j.out" \
      "${alloc[@]}" "$repo/slurm/minimllm.sbatch" "${run_args[@]}"
    ids+=("$id")
    submitted=$((submitted + 1))
    if ((dry_run)); then
      preview | sed 's/^/#   /'
      continue
    fi
    echo "job=$id ranks=$ranks nodes=$nodes rep=$rep global_batch=$batch time=${job_time:-default}" >>"$manifest"
    log "submitted job $id: $ranks ranks on $nodes node(s), rep $rep, global batch $batch${job_time:+, walltime $job_time}"
  done
done

# The report job: Slurm starts it once every job above has ended, however it ended (afterany); it waits
# for them as collect does (they have all ended, so at once) and writes $study/report.
report_id=""
if ((report_job)); then
  dependency=afterany$(printf ':%s' "${ids[@]}")
  collect_command=$(quote "$repo/slurm/sweep.sh" collect "$study" --deadline 600 --poll "$poll" "${hook_args[@]}")
  submit "the report job" --job-name="mllm-$kind-report" --output="$study/%x-%j.out" \
    --dependency="$dependency" "${report_sbatch_args[@]}" -N 1 -n 1 --time="$report_time" \
    --wrap="$collect_command"
  report_id=$id
  if ((dry_run == 0)); then
    echo "report_job=$report_id" >>"$manifest"
    log "submitted report job $report_id (starts when jobs ${ids[*]} have ended; writes $study/report)"
  fi
fi
((dry_run == 0)) || exit 0
log "$submitted job(s) in $study"
if ((wait == 0)); then
  if [ -n "$report_id" ]; then
    log "not waiting (--no-wait); report job $report_id writes $study/report/report.md (log: $study/mllm-$kind-report-$report_id.out)"
  else
    log "not waiting (--no-wait); later: slurm/sweep.sh collect $study"
  fi
  exit 0
fi
if [ -z "$report_id" ]; then
  collect "$study" "$deadline" "$poll" "$env_hook"
  exit $?
fi
wait_report_job "$report_id" "$deadline" "$poll"
