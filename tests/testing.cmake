# testing.cmake - what every directory that adds tests shares (docs/testing.md):
#
# - labels per module: each test gets the labels of every rule below its name matches, so that
#   `ctest -L sched` runs the tests that cover sched/; a test that matches no rule stops the
#   configure step (add a rule);
# - a temporary directory per run: every test runs with TMPDIR=<build>/test-tmp, which the
#   tmpdir_setup fixture empties first and the tmpdir_left_clean fixture checks is empty at the
#   end (tests write under a directory of their own there and remove it, pass or fail);
# - kvsim_split_criterion_tests: one ctest per Criterion test of an executable, discovered from
#   `EXE --list` when ctest starts (criterion_discover.cmake), for executables whose tests are
#   long enough to be worth their own process and timing.
#
# Call kvsim_finish_tests() at the end of each CMakeLists.txt that calls add_test.

set(KVSIM_TEST_TMPDIR ${CMAKE_BINARY_DIR}/test-tmp)

# "<regex on the test name>|<labels, comma-separated>"; every matching rule adds its labels.
# 5 s or more each on an idle 2-core machine: label slow, left out of the README's test command
# (ctest -LE slow, which stays within 120 s) and run by CI in a step of their own (ctest -L
# slow). Issue 65. Also matched against each Criterion test of a split executable.
set(KVSIM_SLOW_TESTS "^(cli_replay_router_view|bench_replay_smoke|bench_sweep_mpi_smoke|cli_stop_signals|cli_replay_html_renders_.*|cli_sweep_pareto_renders|cli_replay_config_property|conform_scenario_property|install_cmake_examples|cli_sweep_mpi_.*|cli_replay_help_is_the_option_table|layering_includes_point_down|cli_replay_threads_views_.*|test_replay_traces/replay/every_trace_with_every_router|test_replay_traces/replay/kv_routed_prompt_hashes_are_the_prompts_own|test_validate_traces|cli_sweep_mooncake_1000|test_replay_disagg/disagg/every_request_completes_and_threads_change_nothing)$")
set(KVSIM_TEST_LABEL_RULES
  "^test_kvpool$|kvpool"
  "^test_kvpool_registry|kvpool"
  "^stress_registry$|kvpool"
  "^bench_(kvpool|registry)_smoke$|kvpool"
  "^test_sched|sched"
  "^conform_(contract[12]_)?(SC|DIS|OFF)-|sched"
  "^conform_(contract[12]_)?OFF-|offload"
  "^(regression|soak)_|sched"
  "^soak_ci_offload$|offload"
  "^test_sched_offload$|offload"
  "^test_offload|offload"
  "^stress_offload|offload"
  "^bench_(offload|settle)_smoke$|offload"
  "^test_(engine|engine_tiers|model|handoff|profile|validate_traces)$|engine"
  "^test_engine_tiers$|offload"
  "^test_replay|replay"
  "^bench_replay_smoke$|replay"
  "^cli_replay_|replay"
  "^cli_replay_(bad_trace_line|bad_csv|trace_sources|stdin_needs_a_format|trace_twice|missing_trace|bad_format)|input"
  "^test_input|input"
  "^cli_(replay|validate)_bounded_|input"
  "^test_(report|output|html)$|report"
  "^cli_replay_(html|timeseries|slo|report|pools)|report"
  "^(conform|regression|soak)_|verify"
  "^cli_(soak|minimize|stress)|verify"
  "^test_verify$|verify"
  "^cli_(validate|calibrate)_|engine"
  "^cli_|cli"
  "^(conform|soak|regression)_|cli"
  "^(test_api|api_threads|test_options)$|api"
  "^python_|api"
  "^(install_|exports_only_public_api$)|install"
  "^python_|install"
  "^(layering_includes_point_down|layering_replay_calls_one_way|configure_names_missing_debian_package|mutation_fragments_found)$|build"
  "^bench_|bench"
  "^tmpdir_|tmpdir"
  "${KVSIM_SLOW_TESTS}|slow")

# kvsim_test_labels(<test name> <out var>): the labels of the rules the name matches; a name
# that matches none stops the configure step.
function(kvsim_test_labels name out)
  set(labels "")
  foreach(rule IN LISTS KVSIM_TEST_LABEL_RULES)
    string(FIND "${rule}" "|" bar REVERSE)
    string(SUBSTRING "${rule}" 0 ${bar} re)
    math(EXPR from "${bar} + 1")
    string(SUBSTRING "${rule}" ${from} -1 these)
    if(name MATCHES "${re}")
      string(REPLACE "," ";" these "${these}")
      list(APPEND labels ${these})
    endif()
  endforeach()
  if(labels STREQUAL "")
    message(FATAL_ERROR "test ${name} matches no label rule: add one to KVSIM_TEST_LABEL_RULES "
                        "in tests/testing.cmake")
  endif()
  list(REMOVE_DUPLICATES labels)
  set(${out} "${labels}" PARENT_SCOPE)
endfunction()

# kvsim_finish_tests(): labels, TMPDIR and the tmpdir fixture for every test of this directory.
function(kvsim_finish_tests)
  get_property(tests DIRECTORY PROPERTY TESTS)
  foreach(t IN LISTS tests)
    kvsim_test_labels(${t} labels)
    set_property(TEST ${t} APPEND PROPERTY LABELS ${labels})
    set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT_MODIFICATION
                 "TMPDIR=set:${KVSIM_TEST_TMPDIR}")
    # Tests replay on the thread counts they ask for, even beyond the machine's CPUs (a user's
    # replay is capped at them: docs/replay.md); cli_replay_threads_capped_at_cpus checks the cap.
    if(NOT t STREQUAL "cli_replay_threads_capped_at_cpus")
      set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT_MODIFICATION
                   "KVSIM_REPLAY_OVERSUBSCRIBE=set:1")
    endif()
    if(NOT t MATCHES "^tmpdir_")
      set_property(TEST ${t} APPEND PROPERTY FIXTURES_REQUIRED kvsim_tmpdir)
    endif()
  endforeach()
endfunction()

# kvsim_split_criterion_tests(<executable target> [TIMEOUT seconds]): instead of one ctest for
# the whole executable, one ctest per Criterion test, named <exe>/<suite>/<test> and run with
# `--filter suite/test -j1` (one test at a time inside: these tests start replay threads of
# their own, which Criterion's parallel jobs would oversubscribe). The list is read when ctest
# starts, so a new Test() is never left out.
function(kvsim_split_criterion_tests target)
  cmake_parse_arguments(arg "" "TIMEOUT" "" ${ARGN})
  if(NOT arg_TIMEOUT)
    set(arg_TIMEOUT 300)
  endif()
  kvsim_test_labels(${target} labels)
  set(file ${CMAKE_CURRENT_BINARY_DIR}/${target}_criterion_tests.cmake)
  file(GENERATE OUTPUT ${file} CONTENT
"set(KVSIM_CD_EXE \"$<TARGET_FILE:${target}>\")
set(KVSIM_CD_NAME \"${target}\")
set(KVSIM_CD_LABELS \"${labels}\")
set(KVSIM_CD_SLOW \"${KVSIM_SLOW_TESTS}\")
set(KVSIM_CD_TIMEOUT \"${arg_TIMEOUT}\")
set(KVSIM_CD_TMPDIR \"${KVSIM_TEST_TMPDIR}\")
include(\"${CMAKE_SOURCE_DIR}/tests/criterion_discover.cmake\")
")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${file})
endfunction()
