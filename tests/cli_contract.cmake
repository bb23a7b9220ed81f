# End-to-end contract of the command line (run by ctest as `cmake -P`):
# exit 0 on success, 2 on invalid input with a one-line message, and no output file for invalid input.
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
set(failures 0)
set(expect_timeout 120)  # seconds a command of expect() may take

# expect(NAME CODE STDERR_REGEX COMMAND...): runs COMMAND in WORK_DIR and checks exit code and stderr.
function(expect name code stderr_regex)
  execute_process(COMMAND ${ARGN} WORKING_DIRECTORY ${WORK_DIR} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err TIMEOUT ${expect_timeout})
  set(ok TRUE)
  if(NOT rc STREQUAL "${code}")
    set(ok FALSE)
  endif()
  if(stderr_regex AND NOT err MATCHES "${stderr_regex}")
    set(ok FALSE)
  endif()
  if(code STREQUAL "2")
    string(STRIP "${err}" stripped)
    string(FIND "${stripped}" "\n" newline)
    if(NOT newline EQUAL -1)
      set(ok FALSE)
      set(rc "${rc} (message is not one line)")
    endif()
  endif()
  set(last_out "${out}" PARENT_SCOPE)
  if(ok)
    message(STATUS "ok   ${name}")
  else()
    message(STATUS "FAIL ${name}: exit ${rc}, expected ${code}\n--- stdout\n${out}\n--- stderr\n${err}")
    math(EXPR n "${failures} + 1")
    set(failures ${n} PARENT_SCOPE)
  endif()
endfunction()

function(expect_no_file name path)
  if(EXISTS ${WORK_DIR}/${path})
    message(STATUS "FAIL ${name}: ${path} was created")
    math(EXPR n "${failures} + 1")
    set(failures ${n} PARENT_SCOPE)
  else()
    message(STATUS "ok   ${name}")
  endif()
endfunction()

file(WRITE ${WORK_DIR}/bad_width.yaml "name: bad\nmodel:\n  llm: {width: 65, heads: 4}\n")
file(WRITE ${WORK_DIR}/typo.yaml "name: typo\nstepz: 3\n")

expect(help 0 "" ${MINIMLLM} --help)
expect(version 0 "" ${MINIMLLM} --version)
if(NOT last_out MATCHES "^minimllm [0-9.]+\nrevision [0-9a-f]+.*build.*\nKokkos [0-9.]+, [A-Za-z]+ backend\nMPI: .+\nBLAS: ")
  message(STATUS "FAIL version_says_what_was_built: ${last_out}")
  math(EXPR failures "${failures} + 1")
endif()
expect(run_help 0 "" ${MINIMLLM} run --help)
expect(no_subcommand 2 "" ${MINIMLLM})
expect(unknown_flag 2 "--bogus" ${MINIMLLM} run --bogus)
expect(missing_deck 2 "missing.yaml" ${MINIMLLM} run missing.yaml --out missing.h5)
expect_no_file(missing_deck_no_output missing.h5)
expect(steps_zero 2 "steps" ${MINIMLLM} run --steps 0 --out zero.h5)
expect_no_file(steps_zero_no_output zero.h5)
expect(invalid_deck 2 "bad_width.yaml: model.llm.width = 65" ${MINIMLLM} run bad_width.yaml --out bad.h5)
expect_no_file(invalid_deck_no_output bad.h5)
expect(invalid_deck_two_ranks 2 "model.llm.width" ${MPIEXEC} -n 2 ${MINIMLLM} run bad_width.yaml --out bad2.h5)
# A layout that does not fit the ranks names the deck as well as the key.
file(WRITE ${WORK_DIR}/tp_pp.yaml "name: tp_pp\nparallel: {tp: 2, pp: 2}\n")
expect(layout_names_the_deck 2 "tp_pp.yaml: parallel.tp x parallel.pp = 2 x 2 = 4: must divide the 2 ranks"
       ${MPIEXEC} -n 2 ${MINIMLLM} run tp_pp.yaml --out tp_pp.h5)
expect_no_file(layout_names_the_deck_no_output tp_pp.h5)
expect_no_file(invalid_deck_two_ranks_no_output bad2.h5)
expect(typo_key 2 "stepz" ${MINIMLLM} run typo.yaml --out typo.h5)
expect(unknown_policy 2 "--policy: magic not in" ${MINIMLLM} run --policy magic --out policy.h5)
expect_no_file(unknown_policy_no_output policy.h5)

# --global-batch on run: range checked by the parser, size guard re-checked against the deck, and used.
expect(run_global_batch_zero 2 "--global-batch" ${MINIMLLM} run --global-batch 0 --out gb0.h5)
expect_no_file(run_global_batch_zero_no_output gb0.h5)
expect(run_global_batch_overflow 2 "with --global-batch: data.global_batch = 16777216: .*tokens per step"
       ${MINIMLLM} run --global-batch 16777216 --out gbhuge.h5)
expect_no_file(run_global_batch_overflow_no_output gbhuge.h5)
execute_process(COMMAND ${MPIEXEC} -n 2 ${MINIMLLM} run --steps 1 --global-batch 5 --out gb5.h5
                WORKING_DIRECTORY ${WORK_DIR} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
if(rc EQUAL 0 AND out MATCHES "global batch 5 samples" AND EXISTS ${WORK_DIR}/gb5.h5)
  message(STATUS "ok   run_global_batch")
else()
  message(STATUS "FAIL run_global_batch: exit ${rc}, expected 0 and a banner with 'global batch 5 samples'\n"
                 "--- stdout\n${out}\n--- stderr\n${err}")
  math(EXPR failures "${failures} + 1")
endif()

# The simulator: a projection for 64 virtual ranks, and its invalid inputs.
expect(simulate 0 "" ${MINIMLLM} simulate ${SOURCE_DIR}/inputs/modality_incoherent.yaml --ranks 64 --global-batch 512
       --steps 2 --out sim.h5)
if(NOT EXISTS ${WORK_DIR}/sim.h5)
  message(STATUS "FAIL simulate_output: sim.h5 was not written")
  math(EXPR failures "${failures} + 1")
endif()
expect(simulate_no_ranks 2 "--ranks" ${MINIMLLM} simulate ${SOURCE_DIR}/inputs/quickstart.yaml)
expect(simulate_too_many_ranks 2 "--ranks.*1048576" ${MINIMLLM} simulate ${SOURCE_DIR}/inputs/quickstart.yaml
       --ranks 1048577)
expect(simulate_bad_policy 2 "--policy" ${MINIMLLM} simulate ${SOURCE_DIR}/inputs/quickstart.yaml --ranks 4
       --policy deck)
expect(simulate_bad_policy_in_list 2 "--policy.*'dhpp' is not a planner" ${MINIMLLM} simulate
       ${SOURCE_DIR}/inputs/quickstart.yaml --ranks 4 --policy static,dhpp)
expect(simulate_policy_list_empty_name 2 "--policy.*'static,,dhp' has an empty name" ${MINIMLLM} simulate
       ${SOURCE_DIR}/inputs/quickstart.yaml --ranks 4 --policy static,,dhp)
expect(simulate_policy_list_all 2 "--policy.*all stands alone" ${MINIMLLM} simulate
       ${SOURCE_DIR}/inputs/quickstart.yaml --ranks 4 --policy all,static)
expect(simulate_policy_list_twice 2 "--policy.*'dhp,dhp' lists dhp twice" ${MINIMLLM} simulate
       ${SOURCE_DIR}/inputs/quickstart.yaml --ranks 4 --policy dhp,dhp)
# A list of planners: one /simulation table each, in the order given.
expect(simulate_policy_list 0 "" ${MINIMLLM} simulate ${SOURCE_DIR}/inputs/quickstart.yaml --ranks 4 --steps 1
       --policy dhp,static --out sim_list.h5)
if(NOT last_out MATCHES "\ndhp +[0-9.]+[^\n]*\nstatic +[0-9.]+")
  message(STATUS "FAIL simulate_policy_list_rows: expected the rows dhp then static\n${last_out}")
  math(EXPR failures "${failures} + 1")
endif()
# static's context-parallel degree must divide the ranks; a sample longer than its bin is invalid input.
expect(simulate_cp_not_dividing 2 "--cp 3 must divide --ranks 8" ${MINIMLLM} simulate
       ${SOURCE_DIR}/inputs/quickstart.yaml --ranks 8 --cp 3 --out sim_cp.h5)
expect_no_file(simulate_cp_not_dividing_no_output sim_cp.h5)
expect(simulate_cp_word 2 "--cp must be a positive integer or best" ${MINIMLLM} simulate
       ${SOURCE_DIR}/inputs/quickstart.yaml --ranks 8 --cp most)
expect(simulate_sample_over_budget 2 "static: sample [0-9]+ of step 0 has [0-9]+ tokens.*tokens_per_rank \\(8\\)"
       ${MINIMLLM} simulate ${SOURCE_DIR}/inputs/quickstart.yaml --ranks 8 --cp 1 --tokens-per-rank 8 --out sim_tpr.h5)
expect_no_file(simulate_sample_over_budget_no_output sim_tpr.h5)

# The machine (simulate --machine FILE) and memory that binds: a preset runs and reports fits; a machine
# file's typo and a batch no layout can hold are invalid input (exit 2, one line, no output).
expect(simulate_machine 0 "" ${MINIMLLM} simulate ${SOURCE_DIR}/inputs/text_longtail.yaml --ranks 64 --steps 1
       --machine ${SOURCE_DIR}/inputs/machines/dgx-h100.yaml)
if(NOT last_out MATCHES "machine \\(.*dgx-h100.yaml" OR NOT last_out MATCHES "fits +peak GiB/rank")
  message(STATUS "FAIL simulate_machine_output: no machine line or fits column\n${last_out}")
  math(EXPR failures "${failures} + 1")
endif()
# Without --out, simulate names its file as run does (<deck name>-simulate-<UTC date-time>.h5), and the
# file records the command line.
file(GLOB sim_default ${WORK_DIR}/text_longtail-simulate-*.h5)
list(LENGTH sim_default sim_default_count)
if(NOT sim_default_count EQUAL 1)
  message(STATUS "FAIL simulate_default_out: ${sim_default_count} text_longtail-simulate-*.h5 files, expected 1")
  math(EXPR failures "${failures} + 1")
else()
  message(STATUS "ok   simulate_default_out")
  find_program(H5DUMP h5dump)
  if(H5DUMP)
    execute_process(COMMAND ${H5DUMP} -w 0 -a /run/command_line ${sim_default} OUTPUT_VARIABLE dump)
    if(dump MATCHES "\"[^\"]*minimllm simulate [^\"]*text_longtail.yaml --ranks 64 --steps 1")
      message(STATUS "ok   simulate_command_line_in_file")
    else()
      message(STATUS "FAIL simulate_command_line_in_file: /run/command_line is not the command line\n${dump}")
      math(EXPR failures "${failures} + 1")
    endif()
  endif()
endif()
file(WRITE ${WORK_DIR}/typo_machine.yaml "machine: {ranks_per_node: 8, memory_gb: 80}\n")
expect(simulate_machine_typo 2 "typo_machine.yaml: machine.memory_gb = 80: unknown key \\(did you mean 'memory_gib'"
       ${MINIMLLM} simulate ${SOURCE_DIR}/inputs/quickstart.yaml --ranks 8 --machine typo_machine.yaml --out sim_m.h5)
expect_no_file(simulate_machine_typo_no_output sim_m.h5)
expect(simulate_does_not_fit 2 "memory: sample [0-9]+ of step 0 has [0-9]+ tokens.*--memory-gib"
       ${MINIMLLM} simulate ${SOURCE_DIR}/inputs/text_longtail.yaml --ranks 8 --gflops 100 --memory-gib 0.01
       --out sim_fit.h5)
expect_no_file(simulate_does_not_fit_no_output sim_fit.h5)
file(WRITE ${WORK_DIR}/tight.yaml "name: tight\nmachine: {memory_gib: 0.0025, peak_gflops: 100}\nparallel: {policy: dhp}\n")
expect(run_does_not_fit 2 "tight.yaml: memory: sample [0-9]+ of step 0 has [0-9]+ tokens.*machine.memory_gib"
       ${MPIEXEC} -n 2 ${MINIMLLM} run tight.yaml --out tight.h5)
expect_no_file(run_does_not_fit_no_output tight.h5)

# Calibration: a quick one of the quickstart model (one rank, then two: collectives measured), its use by
# run and simulate, and invalid calibration input (exit 2, one line naming the file and key, no output).
set(quick_calibration --sizes 3 --repeats 1)
expect(calibrate 0 "" ${MINIMLLM} calibrate ${SOURCE_DIR}/inputs/quickstart.yaml ${quick_calibration} --out cal.yaml)
if(NOT EXISTS ${WORK_DIR}/cal.yaml)
  message(STATUS "FAIL calibrate_output: cal.yaml was not written")
  math(EXPR failures "${failures} + 1")
endif()
expect(calibrate_existing 2 "cal.yaml.*--overwrite" ${MINIMLLM} calibrate ${SOURCE_DIR}/inputs/quickstart.yaml
       ${quick_calibration} --out cal.yaml)
expect(calibrate_two_ranks 0 "" ${MPIEXEC} -n 2 ${MINIMLLM} calibrate ${SOURCE_DIR}/inputs/quickstart.yaml
       ${quick_calibration} --out cal.yaml --overwrite)
if(NOT last_out MATCHES "machine measured: ranks_per_node.*intra_node" OR
   NOT last_out MATCHES "machine not measured: inter_node \\(one node\\)")
  message(STATUS "FAIL calibrate_machine: what was and was not measured is not said\n${last_out}")
  math(EXPR failures "${failures} + 1")
endif()
expect(calibrate_missing_deck 2 "missing.yaml" ${MINIMLLM} calibrate missing.yaml --out cal2.yaml)
expect_no_file(calibrate_missing_deck_no_output cal2.yaml)
expect(run_calibrated 0 "" ${MINIMLLM} run --steps 1 --cost-model cal.yaml --out calibrated.h5)
file(WRITE ${WORK_DIR}/bad_cal.yaml "format: minimllm-calibration-1\nmodel: 3\n")
expect(run_bad_calibration 2 "bad_cal.yaml: model = 3" ${MINIMLLM} run --steps 1 --cost-model bad_cal.yaml
       --out bad_cal.h5)
expect_no_file(run_bad_calibration_no_output bad_cal.h5)
file(WRITE ${WORK_DIR}/no_cal.yaml "name: nocal\nparallel: {cost_model: none.yaml}\n")
expect(deck_missing_calibration 2 "no_cal.yaml: parallel.cost_model = none.yaml" ${MINIMLLM} run no_cal.yaml
       --out no_cal.h5)
expect_no_file(deck_missing_calibration_no_output no_cal.h5)
expect(simulate_calibrated 0 "" ${MINIMLLM} simulate ${SOURCE_DIR}/inputs/quickstart.yaml --ranks 16 --steps 2
       --cost-model cal.yaml --machine cal.yaml --out sim_cal.h5)
expect(simulate_bad_calibration 2 "bad_cal.yaml" ${MINIMLLM} simulate ${SOURCE_DIR}/inputs/quickstart.yaml
       --ranks 16 --cost-model bad_cal.yaml --out sim_bad.h5)
expect_no_file(simulate_bad_calibration_no_output sim_bad.h5)

# A real run, then the same output again: refused without --overwrite, file kept byte for byte.
expect(run_embedded 0 "" ${MPIEXEC} -n 2 ${MINIMLLM} run --steps 2 --out first.h5)
file(SHA256 ${WORK_DIR}/first.h5 before)
expect(existing_output 2 "first.h5.*--overwrite" ${MINIMLLM} run --steps 1 --out first.h5)
file(SHA256 ${WORK_DIR}/first.h5 after)
if(NOT before STREQUAL after)
  message(STATUS "FAIL existing_output_kept: first.h5 changed")
  math(EXPR failures "${failures} + 1")
endif()
expect(overwrite 0 "" ${MINIMLLM} run --steps 1 --out first.h5 --overwrite)

# check_match(NAME TEXT REGEX): one more assertion, counted like the others.
function(check_match name text regex)
  if("${text}" MATCHES "${regex}")
    message(STATUS "ok   ${name}")
  else()
    message(STATUS "FAIL ${name}: no match for \"${regex}\" in\n${text}")
    math(EXPR n "${failures} + 1")
    set(failures ${n} PARENT_SCOPE)
  endif()
endfunction()

# Benchmark runs (docs/RUN_RULES.md): VALID with the FOM line and exit 0 on the shipped small problem;
# INVALID with the reason and exit 3, the file kept with the verdict; bad references are invalid input.
find_program(H5DUMP h5dump)
# A sanitizer build (SANITIZE: MINIMLLM_SANITIZE, scripts/test-sanitize.sh) trains ~20x slower: the 30 steps
# to the reference step would take ~3 minutes there, while the short benchmark runs below cover the same code.
if(SANITIZE)
  message(STATUS "skip benchmark_valid: sanitizer build (${SANITIZE}); the short benchmark runs cover its code")
else()
  expect(benchmark_valid 0 "" ${MPIEXEC} -n 2 ${MINIMLLM} run ${SOURCE_DIR}/inputs/reference/small.yaml --out small.h5)
  check_match(benchmark_valid_fom "${last_out}"
              "minimllm FOM problem=small tokens_per_second=[0-9.]+ tokens_per_second_per_node=[0-9.]+ samples_per_second=[0-9.]+ mfu=[0-9.]+ attainable_fraction=[0-9.]+ ranks=2 nodes=1 policy=dhp verdict=VALID")
  check_match(benchmark_valid_verdict "${last_out}" "\nVALID\n")
endif()
file(WRITE ${WORK_DIR}/wrong.reference.yaml
     "problem: small\nstep: 2\nloss: 9.99\nrelative_tolerance: 1.0e-4\ninvariance_steps: 2\n"
     "invariance_relative_tolerance: 1.0e-5\n")
expect(benchmark_invalid_loss 3 "INVALID: loss at step 2 is [0-9.]+, the reference 9.990000: relative difference"
       ${MINIMLLM} run ${SOURCE_DIR}/inputs/reference/small.yaml --steps 3 --reference wrong.reference.yaml
       --out wrong.h5)
check_match(benchmark_invalid_loss_stdout "${last_out}" "verdict=INVALID\nINVALID: loss at step 2 is ")
if(NOT EXISTS ${WORK_DIR}/wrong.h5)
  message(STATUS "FAIL benchmark_invalid_file_kept: wrong.h5 is gone")
  math(EXPR failures "${failures} + 1")
endif()
if(H5DUMP)
  execute_process(COMMAND ${H5DUMP} -a /run/verdict -a /run/verdict_reason ${WORK_DIR}/wrong.h5 OUTPUT_VARIABLE dump)
  check_match(benchmark_invalid_verdict_in_file "${dump}" "\"INVALID\".*\"loss at step 2 is ")
  execute_process(COMMAND ${H5DUMP} -H -d /steps ${WORK_DIR}/wrong.h5 OUTPUT_VARIABLE dump)
  check_match(benchmark_invalid_rows_kept "${dump}" "SIMPLE { \\( 3 \\) / \\( H5S_UNLIMITED \\) }")
endif()
expect(benchmark_too_short 3 "INVALID: the run has 2 steps and never reached the reference step 29"
       ${MINIMLLM} run ${SOURCE_DIR}/inputs/reference/small.yaml --steps 2 --out short.h5)
expect(benchmark_missing_reference 2 "--reference" ${MINIMLLM} run --reference nothere.yaml --out nothere.h5)
expect_no_file(benchmark_missing_reference_no_output nothere.h5)
expect(benchmark_other_problem 2 "belongs to problem small, but the deck .* is problem quickstart"
       ${MINIMLLM} run --reference ${SOURCE_DIR}/inputs/reference/small.reference.yaml --out other.h5)
expect_no_file(benchmark_other_problem_no_output other.h5)
file(WRITE ${WORK_DIR}/dangling.yaml "name: dangling\nbenchmark: {reference: nothere.reference.yaml}\n")
expect(benchmark_dangling_deck_reference 2 "dangling.yaml: benchmark.reference = nothere.reference.yaml: no such file"
       ${MINIMLLM} run dangling.yaml --out dangling.h5)
expect_no_file(benchmark_dangling_no_output dangling.h5)

# A run whose loss or gradient turns non-finite (lr 1e6) stops at that step on every rank: exit 1, one line
# naming the step and the tensor, the completed steps kept in a readable file; a benchmark run that
# diverges likewise, with no verdict and no FOM line.
file(READ ${SOURCE_DIR}/inputs/quickstart.yaml deck)
string(REGEX REPLACE "lr: [0-9.e-]+" "lr: 1.0e6" deck "${deck}")
file(WRITE ${WORK_DIR}/diverge.yaml "${deck}")
set(non_finite_line "^minimllm: step [1-9][0-9]*: non-finite [^\n]*gradient in [a-z_0-9.]+\n$")
expect(run_non_finite 1 "${non_finite_line}" ${MPIEXEC} -n 2 ${MINIMLLM} run diverge.yaml --out diverge.h5)
check_match(run_non_finite_stops_at_the_step "${last_out}" "\nstep +0/40 [^\n]*\n$")
if(H5DUMP)
  execute_process(COMMAND ${H5DUMP} -a /run/stopped ${WORK_DIR}/diverge.h5 OUTPUT_VARIABLE dump)
  check_match(run_non_finite_stopped_in_file "${dump}" "\"step [1-9][0-9]*: non-finite ")
  execute_process(COMMAND ${H5DUMP} -H -d /steps ${WORK_DIR}/diverge.h5 OUTPUT_VARIABLE dump)
  check_match(run_non_finite_rows_kept "${dump}" "SIMPLE { \\( 1 \\) / \\( H5S_UNLIMITED \\) }")
endif()
file(READ ${SOURCE_DIR}/inputs/reference/small.yaml deck)
string(REGEX REPLACE "lr: [0-9.e-]+" "lr: 1.0e6" deck "${deck}")
file(WRITE ${WORK_DIR}/small_diverge.yaml "${deck}")
expect(benchmark_non_finite 1 "${non_finite_line}" ${MPIEXEC} -n 2 ${MINIMLLM} run small_diverge.yaml --reference
       ${SOURCE_DIR}/inputs/reference/small.reference.yaml --out small_diverge.h5)
if("${last_out}" MATCHES "minimllm FOM|VALID|PERFORMANCE")
  message(STATUS "FAIL benchmark_non_finite_no_verdict: a verdict or FOM line was printed\n${last_out}")
  math(EXPR failures "${failures} + 1")
else()
  message(STATUS "ok   benchmark_non_finite_no_verdict")
endif()

# Output safety (docs/HDF5.md, "Output safety").
# check_same(NAME FILE SHA): FILE still has the SHA256 it had.
macro(check_same name path sha)
  file(SHA256 ${path} same_sha)
  check_match(${name} "${same_sha}" "^${sha}$")
endmacro()

# --out may never name the deck, the calibration or the reference, even with --overwrite.
file(COPY ${SOURCE_DIR}/inputs/quickstart.yaml DESTINATION ${WORK_DIR})
file(SHA256 ${WORK_DIR}/quickstart.yaml deck_sha)
expect(out_is_deck 2 "quickstart.yaml: the output file would replace the deck" ${MINIMLLM} run quickstart.yaml
       --steps 1 --out quickstart.yaml --overwrite)
check_same(out_is_deck_untouched ${WORK_DIR}/quickstart.yaml ${deck_sha})
expect(out_is_deck_other_spelling 2 "would replace the deck" ${MINIMLLM} run quickstart.yaml --steps 1
       --out ./no-such-dir/../quickstart.yaml --overwrite)
check_same(out_is_deck_other_spelling_untouched ${WORK_DIR}/quickstart.yaml ${deck_sha})
file(SHA256 ${WORK_DIR}/cal.yaml cal_sha)
expect(out_is_calibration 2 "cal.yaml: the output file would replace the calibration file" ${MINIMLLM} run
       --steps 1 --cost-model cal.yaml --out cal.yaml --overwrite)
check_same(out_is_calibration_untouched ${WORK_DIR}/cal.yaml ${cal_sha})
file(COPY ${SOURCE_DIR}/inputs/reference/small.reference.yaml DESTINATION ${WORK_DIR})
file(SHA256 ${WORK_DIR}/small.reference.yaml ref_sha)
expect(out_is_reference 2 "would replace the benchmark reference" ${MINIMLLM} run
       ${SOURCE_DIR}/inputs/reference/small.yaml --steps 1 --reference small.reference.yaml
       --out small.reference.yaml --overwrite)
check_same(out_is_reference_untouched ${WORK_DIR}/small.reference.yaml ${ref_sha})
expect(calibrate_out_is_deck 2 "would replace the deck" ${MINIMLLM} calibrate quickstart.yaml
       ${quick_calibration} --out quickstart.yaml --overwrite)
check_same(calibrate_out_is_deck_untouched ${WORK_DIR}/quickstart.yaml ${deck_sha})

# --policy all checks every policy's output before the first policy runs: nothing runs, nothing is written.
file(WRITE ${WORK_DIR}/pall-disagg.h5 "an earlier run's file\n")
expect(policy_all_existing_output 2 "pall-disagg.h5: output file exists" ${MINIMLLM} run --steps 1 --policy all
       --out pall.h5)
expect_no_file(policy_all_existing_output_nothing_run pall-static.h5)
file(COPY ${WORK_DIR}/quickstart.yaml DESTINATION ${WORK_DIR}/pdeck)
file(RENAME ${WORK_DIR}/pdeck/quickstart.yaml ${WORK_DIR}/pdeck-dhp.h5)
expect(policy_all_output_names_the_deck 2 "pdeck-dhp.h5: the output file would replace the deck" ${MINIMLLM}
       run pdeck-dhp.h5 --steps 1 --policy all --out pdeck.h5 --overwrite)
expect_no_file(policy_all_output_names_the_deck_nothing_run pdeck-static.h5)

# --repeat: each policy's runs in files of their own and the comparison in a CSV, one row per run; a second
# time, the existing comparison file stops it before anything runs.
expect(repeat_runs 0 "" ${MINIMLLM} run --steps 2 --policy static --repeat 2 --out rep.h5)
file(STRINGS ${WORK_DIR}/rep-comparison.csv rep_rows)
list(LENGTH rep_rows rep_count)
if(rep_count EQUAL 3 AND EXISTS ${WORK_DIR}/rep-r1.h5 AND EXISTS ${WORK_DIR}/rep-r2.h5
   AND rep_rows MATCHES "static,2,rep-r2.h5,2,")
  message(STATUS "ok   repeat_runs_files")
else()
  message(STATUS "FAIL repeat_runs_files: ${rep_count} rows: ${rep_rows}")
  math(EXPR failures "${failures} + 1")
endif()
file(REMOVE ${WORK_DIR}/rep-r1.h5 ${WORK_DIR}/rep-r2.h5)
expect(repeat_existing_comparison 2 "rep-comparison.csv: output file exists" ${MINIMLLM} run --steps 2 --repeat 2
       --out rep.h5)
expect_no_file(repeat_existing_comparison_nothing_run rep-r1.h5)
expect(repeat_checkpoint 2 "--repeat: checkpoints and restarts are per run" ${MINIMLLM} run --steps 2 --repeat 2
       --checkpoint-every 1 --out rep2.h5)

# --overwrite of a file a running minimllm writes is refused and the file is kept: the running job is
# stood in for by flock(1) holding the lock on first.h5.lock while the second run starts.
find_program(FLOCK flock)
if(FLOCK)
  file(SHA256 ${WORK_DIR}/first.h5 first_sha)
  expect(overwrite_running_output 2 "first.h5 is being written by another running minimllm" ${FLOCK}
         first.h5.lock ${MINIMLLM} run --steps 1 --out first.h5 --overwrite)
  check_same(overwrite_running_output_untouched ${WORK_DIR}/first.h5 ${first_sha})
  expect(policy_all_running_output 2 "pall-orch.h5 is being written by another running minimllm" ${FLOCK}
         pall-orch.h5.lock ${MINIMLLM} run --steps 1 --policy all --out pall.h5 --overwrite)
  expect_no_file(policy_all_running_output_nothing_run pall-static.h5)
  # A lock file left behind by a killed run holds no lock.
  file(WRITE ${WORK_DIR}/first.h5.lock "12345\n")
  expect(stale_lock_file 0 "" ${MINIMLLM} run --steps 1 --out first.h5 --overwrite)
  expect_no_file(stale_lock_file_removed first.h5.lock)
else()
  message(STATUS "skip overwrite_running_output: no flock(1)")
endif()

# A file only one rank sees: every rank agrees, the failing rank's message is printed once (one line), exit
# 2 in bounded time (it used to hang: a 60 s limit turns a regression into a failure).
set(expect_timeout 60)
file(MAKE_DIRECTORY ${WORK_DIR}/rank_a ${WORK_DIR}/rank_b)
file(COPY ${SOURCE_DIR}/inputs/quickstart.yaml ${WORK_DIR}/cal.yaml DESTINATION ${WORK_DIR}/rank_a)
expect(rank_local_missing_deck 2 "quickstart.yaml" ${MPIEXEC} -n 1 -wdir ${WORK_DIR}/rank_a ${MINIMLLM}
               run quickstart.yaml --steps 1 --out local.h5 : -n 1 -wdir ${WORK_DIR}/rank_b ${MINIMLLM} run
               quickstart.yaml --steps 1 --out local.h5)
expect_no_file(rank_local_missing_deck_no_output rank_a/local.h5)
expect(rank_local_missing_calibration 2 "cal.yaml: cannot read calibration file" ${MPIEXEC} -n 1 -wdir
               ${WORK_DIR}/rank_a ${MINIMLLM} run --steps 1 --cost-model cal.yaml --out local.h5 : -n 1 -wdir
               ${WORK_DIR}/rank_b ${MINIMLLM} run --steps 1 --cost-model cal.yaml --out local.h5)
expect_no_file(rank_local_missing_calibration_no_output rank_a/local.h5)
set(expect_timeout 120)

# A full disk (a 64 KiB tmpfs, where this process may mount one), on 1 and 2 ranks: exit 1, one line, no
# file left, no crash, no MPI_Abort.
file(MAKE_DIRECTORY ${WORK_DIR}/full)
execute_process(COMMAND mount -t tmpfs -o size=64k tmpfs ${WORK_DIR}/full RESULT_VARIABLE mounted
                OUTPUT_QUIET ERROR_QUIET)
if(mounted EQUAL 0)
  foreach(ranks 1 2)
    execute_process(COMMAND ${MPIEXEC} -n ${ranks} ${MINIMLLM} run --steps 2 --out full/run.h5
                    WORKING_DIRECTORY ${WORK_DIR} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                    TIMEOUT 120)
    string(STRIP "${err}" stripped)
    # One line, no MPI_Abort (every rank agreed), no file left.
    if(rc STREQUAL "1" AND stripped MATCHES "^minimllm: rank 0: runtime failure: full/run.h5: [^\n]*$"
       AND NOT EXISTS ${WORK_DIR}/full/run.h5)
      message(STATUS "ok   disk_full_np${ranks}")
    else()
      message(STATUS "FAIL disk_full_np${ranks}: exit ${rc}, expected 1, one line and no file\n--- stderr\n${err}")
      math(EXPR failures "${failures} + 1")
    endif()
  endforeach()
  execute_process(COMMAND umount ${WORK_DIR}/full)
else()
  message(STATUS "skip disk_full: cannot mount a tmpfs here")
endif()

# Memory feasibility: a global batch far beyond any rank's memory stops both ranks at start-up with exit 2,
# one line naming the keys and what would fit, and no output file (not an allocation failure, exit 1).
expect(run_memory_too_large 2 "memory: the run needs .* GiB per rank .*data.global_batch = 1000000.* would fit"
       ${MPIEXEC} -n 2 ${MINIMLLM} run --global-batch 1000000 --out toobig.h5)
expect_no_file(run_memory_too_large_no_output toobig.h5)

# A run of 10^8 steps starts at once: the start-up estimate plans a bounded number of steps (kEstimateSteps),
# and the banner and step lines are flushed as they are printed. The run is killed at the timeout.
execute_process(COMMAND ${MINIMLLM} run --steps 100000000 --out long.h5 WORKING_DIRECTORY ${WORK_DIR}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 20)
if(out MATCHES "global batch" AND out MATCHES "step +1/100000000")
  message(STATUS "ok   run_many_steps_starts_promptly")
else()
  message(STATUS "FAIL run_many_steps_starts_promptly: no banner and step 1 within 20 s (${rc})\n"
                 "--- stdout\n${out}\n--- stderr\n${err}")
  math(EXPR failures "${failures} + 1")
endif()

# The stall watchdog (a rank stopped with SIGSTOP), kill -9, a disk filling mid-run: tests/fault_injection.sh
# (ctest fault_injection).


# Checkpoint and restart (docs/RUNNING.md): the file next to --out by default, a restart goes on from it;
# a checkpoint that is missing, of another run or would replace a file is invalid input (exit 2, no output).
expect(checkpoint_written 0 "" ${MPIEXEC} -n 2 ${MINIMLLM} run --steps 2 --checkpoint-every 2 --out ck.h5)
if(NOT EXISTS ${WORK_DIR}/ck.ckpt.h5)
  message(STATUS "FAIL checkpoint_default_path: ck.ckpt.h5 was not written")
  math(EXPR failures "${failures} + 1")
endif()
expect(restart_runs_the_rest 0 "" ${MPIEXEC} -n 2 ${MINIMLLM} run --steps 4 --restart ck.ckpt.h5 --out ck_rest.h5)
if(NOT last_out MATCHES "restart: from ck.ckpt.h5 \\(the state after 2 steps" OR NOT last_out MATCHES "step +3/4")
  message(STATUS "FAIL restart_starts_at_the_checkpoint_step:\n${last_out}")
  math(EXPR failures "${failures} + 1")
endif()
expect(restart_missing 2 "nope.ckpt.h5: no such checkpoint file" ${MINIMLLM} run --steps 4 --restart nope.ckpt.h5
       --out nope.h5)
expect_no_file(restart_missing_no_output nope.h5)
expect(restart_not_a_checkpoint 2 "ck.h5: not a minimllm checkpoint" ${MINIMLLM} run --steps 4 --restart ck.h5
       --out notck.h5)
expect(restart_nothing_left 2 "nothing is left to run" ${MINIMLLM} run --steps 2 --restart ck.ckpt.h5 --out done.h5)
expect_no_file(restart_nothing_left_no_output done.h5)
expect(restart_other_deck 2 "another deck" ${MINIMLLM} run ${SOURCE_DIR}/inputs/text_longtail.yaml --steps 4
       --restart ck.ckpt.h5 --out other.h5)
expect(checkpoint_exists 2 "ck.ckpt.h5: file exists; pass --overwrite" ${MINIMLLM} run --steps 2 --checkpoint-every 1
       --checkpoint ck.ckpt.h5 --out ck2.h5)
expect_no_file(checkpoint_exists_no_output ck2.h5)
expect(checkpoint_names_the_output 2 "would replace the output file" ${MINIMLLM} run --steps 2 --checkpoint-every 1
       --checkpoint ck3.h5 --out ck3.h5)
file(WRITE ${WORK_DIR}/ck_deck.yaml "name: ckdeck\n")
expect(checkpoint_names_the_deck 2 "would replace the deck" ${MINIMLLM} run ck_deck.yaml --steps 2
       --checkpoint ck_deck.yaml --out ck4.h5)
expect(checkpoint_policy_all 2 "--policy all: checkpoints and restarts are per run" ${MINIMLLM} run --steps 2
       --policy all --checkpoint-every 1 --out ck5.h5)
expect(restart_benchmark 2 "cannot be restarted" ${MINIMLLM} run ${SOURCE_DIR}/inputs/reference/small.yaml
       --restart ck.ckpt.h5 --out ck6.h5)

# Untrusted paths and inputs (docs/HDF5.md, "Output safety", docs/RUNNING.md, "Inputs"): on a
# shared directory another user may plant names. A link, FIFO, device or directory at any name a run
# creates or replaces is refused (exit 2 naming it) and nothing is written through it; an input is a
# regular file of at most 64 MiB, refused at once otherwise (a FIFO used to hang the run); no input is
# replaced by an output; command-line numbers are finite and integers decimal. A hang fails in 30 s.
set(expect_timeout 30)
file(MAKE_DIRECTORY ${WORK_DIR}/planted)
file(WRITE ${WORK_DIR}/planted/victim.txt "victim\n")
file(SHA256 ${WORK_DIR}/planted/victim.txt victim_sha)
file(COPY ${SOURCE_DIR}/inputs/quickstart.yaml DESTINATION ${WORK_DIR}/planted)
file(SHA256 ${WORK_DIR}/planted/quickstart.yaml planted_deck_sha)
# plant(NAME COMMAND...): makes a planted name with a shell command in planted/.
macro(plant)
  execute_process(COMMAND ${ARGN} WORKING_DIRECTORY ${WORK_DIR}/planted RESULT_VARIABLE planted_rc)
endmacro()
plant(ln -s victim.txt lock.h5.lock)
expect(planted_lock_link 2 "lock.h5.lock: is a symbolic link" ${MINIMLLM} run --steps 1 --out planted/lock.h5)
check_same(planted_lock_link_victim_untouched ${WORK_DIR}/planted/victim.txt ${victim_sha})
expect_no_file(planted_lock_link_no_output planted/lock.h5)
plant(ln -s nowhere.txt dangling.h5.lock)
expect(planted_dangling_lock_link 2 "dangling.h5.lock: is a symbolic link" ${MINIMLLM} run --steps 1
       --out planted/dangling.h5)
expect_no_file(planted_dangling_lock_link_creates_nothing planted/nowhere.txt)
plant(ln -s victim.txt link.h5)
expect(planted_out_link 2 "link.h5: is a symbolic link" ${MINIMLLM} run --steps 1 --out planted/link.h5 --overwrite)
check_same(planted_out_link_victim_untouched ${WORK_DIR}/planted/victim.txt ${victim_sha})
expect(planted_out_link_two_ranks 2 "link.h5: is a symbolic link" ${MPIEXEC} -n 2 ${MINIMLLM} run --steps 1
       --out planted/link.h5 --overwrite)
plant(mkfifo fifo.h5)
expect(planted_out_fifo 2 "fifo.h5: is a FIFO" ${MINIMLLM} run --steps 1 --out planted/fifo.h5 --overwrite)
plant(test -p fifo.h5)
check_match(planted_out_fifo_kept "${planted_rc}" "^0$")
plant(mkfifo fifolock.h5.lock)
expect(planted_lock_fifo 2 "fifolock.h5.lock: is a FIFO" ${MINIMLLM} run --steps 1 --out planted/fifolock.h5)
# A character device (a copy of /dev/null's node, where this process may make one; never /dev/null itself,
# which a binary without the check would replace).
plant(mknod null.h5 c 1 3)
if(planted_rc EQUAL 0)
  expect(out_character_device 2 "null.h5: is a character device" ${MINIMLLM} run --steps 1 --out planted/null.h5
         --overwrite)
  plant(test -c null.h5)
  check_match(out_character_device_kept "${planted_rc}" "^0$")
else()
  message(STATUS "skip out_character_device: mknod is not permitted here")
endif()
file(MAKE_DIRECTORY ${WORK_DIR}/planted/dir.h5)
expect(out_directory 2 "dir.h5: is a directory" ${MINIMLLM} run --steps 1 --out planted/dir.h5 --overwrite)
plant(ln -s quickstart.yaml ck_link.ckpt.h5.lock)
expect(planted_checkpoint_lock_link 2 "ck_link.ckpt.h5.lock: is a symbolic link" ${MINIMLLM} run
       planted/quickstart.yaml --steps 1 --checkpoint-every 1 --checkpoint planted/ck_link.ckpt.h5 --out planted/ck.h5)
check_same(planted_checkpoint_lock_link_deck_untouched ${WORK_DIR}/planted/quickstart.yaml ${planted_deck_sha})
plant(ln -s victim.txt ck_out.ckpt.h5)
expect(planted_checkpoint_link 2 "ck_out.ckpt.h5: is a symbolic link" ${MINIMLLM} run --steps 1 --checkpoint-every 1
       --checkpoint planted/ck_out.ckpt.h5 --overwrite --out planted/ck2.h5)
check_same(planted_checkpoint_link_victim_untouched ${WORK_DIR}/planted/victim.txt ${victim_sha})
plant(ln -s victim.txt cal_link.yaml)
expect(planted_calibration_out_link 2 "cal_link.yaml: is a symbolic link" ${MINIMLLM} calibrate
       planted/quickstart.yaml ${quick_calibration} --out planted/cal_link.yaml --overwrite)
check_same(planted_calibration_out_link_victim_untouched ${WORK_DIR}/planted/victim.txt ${victim_sha})
plant(ln -s victim.txt sim_link.h5)
expect(planted_simulate_out_link 2 "sim_link.h5: is a symbolic link" ${MINIMLLM} simulate planted/quickstart.yaml
       --ranks 4 --out planted/sim_link.h5 --overwrite)
# The lock file may not be an input either (it is created and holds a pid).
execute_process(COMMAND ${CMAKE_COMMAND} -E copy ${WORK_DIR}/planted/quickstart.yaml ${WORK_DIR}/planted/lk.h5.lock)
expect(lock_is_deck 2 "lk.h5: the lock file planted/lk.h5.lock of the output file would replace the deck" ${MINIMLLM}
       run planted/lk.h5.lock --steps 1 --out planted/lk.h5)
check_same(lock_is_deck_untouched ${WORK_DIR}/planted/lk.h5.lock ${planted_deck_sha})
# A restart's checkpoint is an input: --out may not replace it (its own --checkpoint may go on).
file(COPY ${WORK_DIR}/ck.ckpt.h5 DESTINATION ${WORK_DIR}/planted)
file(SHA256 ${WORK_DIR}/planted/ck.ckpt.h5 self_sha)
expect(out_is_restart_checkpoint 2 "would replace the restart checkpoint" ${MINIMLLM} run --steps 4
       --restart planted/ck.ckpt.h5 --out planted/ck.ckpt.h5 --overwrite)
check_same(out_is_restart_checkpoint_untouched ${WORK_DIR}/planted/ck.ckpt.h5 ${self_sha})

# Inputs: regular files of bounded size, refused at once (a FIFO as the deck used to hang the run).
plant(mkfifo deck.fifo)
expect(deck_fifo 2 "deck.fifo: cannot read deck: not a regular file" ${MINIMLLM} run planted/deck.fifo --out f.h5)
expect(deck_fifo_two_ranks 2 "deck.fifo: cannot read deck: not a regular file" ${MPIEXEC} -n 2 ${MINIMLLM} run
       planted/deck.fifo --out f.h5)
expect(deck_dev_zero 2 "/dev/zero: cannot read deck: not a regular file" ${MINIMLLM} run /dev/zero --out z.h5)
expect(cost_model_dev_zero 2 "/dev/zero: cannot read calibration file: not a regular file" ${MINIMLLM} run
       --steps 1 --cost-model /dev/zero --out z.h5)
expect(machine_dev_urandom 2 "/dev/urandom: cannot read machine file: not a regular file" ${MINIMLLM} simulate
       planted/quickstart.yaml --ranks 4 --machine /dev/urandom)
expect(reference_fifo 2 "deck.fifo: cannot read benchmark reference: not a regular file" ${MINIMLLM} run
       --steps 1 --reference planted/deck.fifo --out z.h5)
expect(restart_fifo 2 "deck.fifo: not a regular file" ${MINIMLLM} run --steps 4 --restart planted/deck.fifo
       --out z.h5)
plant(truncate -s 65M big.yaml)
expect(deck_too_large 2 "big.yaml: cannot read deck: 68157440 bytes, more than the 64 MiB" ${MINIMLLM} run
       planted/big.yaml --out z.h5)
file(REMOVE ${WORK_DIR}/planted/big.yaml)
expect_no_file(inputs_no_output z.h5)

# Command-line numbers: finite, in readable bounds; integers in decimal; no empty path.
foreach(flag --memory-gib --gflops --planning-ms)
  expect(simulate_nan${flag} 2 "${flag}: 'nan' is not a finite number in" ${MINIMLLM} simulate
         planted/quickstart.yaml --ranks 4 ${flag} nan)
  expect(simulate_inf${flag} 2 "${flag}: 'inf' is not a finite number in [[(]0, [0-9e+]+\\]" ${MINIMLLM} simulate
         planted/quickstart.yaml --ranks 4 ${flag} inf)
endforeach()
expect(simulate_memory_out_of_range 2 "--memory-gib: 1e300 is outside \\(0, 1e\\+06\\]" ${MINIMLLM} simulate
       planted/quickstart.yaml --ranks 4 --memory-gib 1e300)
expect(steps_hex 2 "--steps: '0x10' is not a decimal integer" ${MINIMLLM} run --steps 0x10 --out hex.h5)
expect(steps_octal_read_as_decimal 0 "" ${MINIMLLM} run --steps 010 --global-batch 8 --out planted/dec.h5)
check_match(steps_octal_read_as_decimal_ten "${last_out}" "step +9/10")
expect(ranks_binary 2 "--ranks: '0b11' is not a decimal integer" ${MINIMLLM} simulate planted/quickstart.yaml
       --ranks 0b11)
# (through sh: CMake drops an empty argument)
expect(out_empty 2 "--out: an empty path" sh -c "\"$0\" run --steps 1 --out ''" ${MINIMLLM})
expect(checkpoint_empty 2 "--checkpoint: an empty path" sh -c "\"$0\" run --steps 1 --out e.h5 --checkpoint ''"
       ${MINIMLLM})
expect(restart_empty 2 "--restart: an empty path" sh -c "\"$0\" run --steps 1 --out e.h5 --restart ''" ${MINIMLLM})
expect_no_file(empty_paths_no_output e.h5)
expect(calibrate_rows_beyond_memory 2 "--rows 1073741824 rows per call: .*GiB per rank, more than the" ${MINIMLLM}
       calibrate planted/quickstart.yaml --rows 1073741824 --out planted/rows.yaml)
expect_no_file(calibrate_rows_beyond_memory_no_output planted/rows.yaml)

# Every rank reads the same bytes of every input: two working directories whose decks differ in the seed.
file(MAKE_DIRECTORY ${WORK_DIR}/agree_a ${WORK_DIR}/agree_b)
file(WRITE ${WORK_DIR}/agree_a/deck.yaml "name: agree\nseed: 1\n")
file(WRITE ${WORK_DIR}/agree_b/deck.yaml "name: agree\nseed: 2\n")
expect(ranks_read_other_decks 2 "deck.yaml: the deck differs between ranks: rank 1 read sha256 [0-9a-f]+, rank 0"
       ${MPIEXEC} -n 1 -wdir ${WORK_DIR}/agree_a ${MINIMLLM} run deck.yaml --steps 1 --out agree.h5 : -n 1 -wdir
       ${WORK_DIR}/agree_b ${MINIMLLM} run deck.yaml --steps 1 --out agree.h5)
expect_no_file(ranks_read_other_decks_no_output agree_a/agree.h5)
file(WRITE ${WORK_DIR}/agree_b/deck.yaml "name: agree\nseed: 1\n")
execute_process(COMMAND ${CMAKE_COMMAND} -E copy ${WORK_DIR}/cal.yaml ${WORK_DIR}/agree_a/cal.yaml)
file(READ ${WORK_DIR}/cal.yaml cal_text)
file(WRITE ${WORK_DIR}/agree_b/cal.yaml "${cal_text}# another copy\n")
expect(ranks_read_other_calibrations 2 "cal.yaml: the calibration file differs between ranks: rank 1" ${MPIEXEC}
       -n 1 -wdir ${WORK_DIR}/agree_a ${MINIMLLM} run deck.yaml --steps 1 --cost-model cal.yaml --out agree.h5 : -n 1
       -wdir ${WORK_DIR}/agree_b ${MINIMLLM} run deck.yaml --steps 1 --cost-model cal.yaml --out agree.h5)

# A damaged checkpoint is exit 2 with one line, never an abort: one flipped bit in /state/params (its
# sha256 no longer matches), a next_step of 2^40 (the attributes' sha256 no longer matches).
set(python /usr/bin/python3)  # Debian's, with python3-h5py (as in fault_injection.sh)
if(NOT EXISTS ${python})
  set(python python3)
endif()
execute_process(COMMAND ${python} -c "import h5py" RESULT_VARIABLE no_h5py OUTPUT_QUIET ERROR_QUIET)
if(no_h5py EQUAL 0)
  file(COPY ${WORK_DIR}/ck.ckpt.h5 DESTINATION ${WORK_DIR}/damaged)
  execute_process(COMMAND ${python} -c "
import h5py, numpy as np
with h5py.File('damaged/ck.ckpt.h5', 'r+') as f:
    p = f['state/params']
    v = p[0:1].view(np.uint32) ^ np.uint32(1)
    p[0:1] = v.view(np.float32)
" WORKING_DIRECTORY ${WORK_DIR})
  expect(checkpoint_bit_flip 2 "ck.ckpt.h5: damaged checkpoint: /state/params does not match its sha256" ${MPIEXEC}
         -n 2 ${MINIMLLM} run --steps 4 --restart damaged/ck.ckpt.h5 --out damaged.h5)
  file(COPY ${WORK_DIR}/ck.ckpt.h5 DESTINATION ${WORK_DIR}/damaged2)
  execute_process(COMMAND ${python} -c "
import h5py, numpy as np
with h5py.File('damaged2/ck.ckpt.h5', 'r+') as f:
    f['checkpoint'].attrs['next_step'] = np.int64(1 << 40)
" WORKING_DIRECTORY ${WORK_DIR})
  expect(checkpoint_next_step_changed 2 "ck.ckpt.h5: damaged checkpoint: the /checkpoint attributes do not match"
         ${MPIEXEC} -n 2 ${MINIMLLM} run --steps 4 --restart damaged2/ck.ckpt.h5 --out damaged.h5)
  expect_no_file(damaged_checkpoint_no_output damaged.h5)
else()
  message(STATUS "skip checkpoint_bit_flip, checkpoint_next_step_changed: python3 cannot import h5py")
endif()
set(expect_timeout 120)

if(failures GREATER 0)
  message(FATAL_ERROR "${failures} command-line contract check(s) failed")
endif()
