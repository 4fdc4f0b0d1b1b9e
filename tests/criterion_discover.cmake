# criterion_discover.cmake - included by ctest (TEST_INCLUDE_FILES, see testing.cmake): lists
# the Criterion tests of KVSIM_CD_EXE and adds one ctest per test. When the executable is missing
# or cannot list its tests, one failing test says so (nothing is dropped silently).

function(kvsim_cd_fail why)
  add_test("${KVSIM_CD_NAME}" bash -c "echo '${why}' >&2; exit 1")
  set_tests_properties("${KVSIM_CD_NAME}" PROPERTIES LABELS "${KVSIM_CD_LABELS}")
endfunction()

if(NOT EXISTS "${KVSIM_CD_EXE}")
  kvsim_cd_fail("${KVSIM_CD_EXE} is not built: cmake --build the build tree first")
  return()
endif()
execute_process(COMMAND "${KVSIM_CD_EXE}" --list OUTPUT_VARIABLE _out ERROR_VARIABLE _out
                RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  kvsim_cd_fail("${KVSIM_CD_EXE} --list exited ${_rc}")
  return()
endif()
# The listing: "suite: N tests" then one "├── name" or "└── name" line per test.
string(REPLACE "\n" ";" _lines "${_out}")
set(_suite "")
set(_count 0)
foreach(_line IN LISTS _lines)
  if(_line MATCHES "^([A-Za-z0-9_]+): [0-9]+ tests?$")
    set(_suite "${CMAKE_MATCH_1}")
  elseif(_line MATCHES "── ([A-Za-z0-9_]+)" AND NOT _suite STREQUAL "")
    set(_t "${_suite}/${CMAKE_MATCH_1}")
    add_test("${KVSIM_CD_NAME}/${_t}" "${KVSIM_CD_EXE}" --filter "${_t}" -j1)
    set(_labels "${KVSIM_CD_LABELS}")
    if("${KVSIM_CD_NAME}/${_t}" MATCHES "${KVSIM_CD_SLOW}") # testing.cmake's slow tests
      list(APPEND _labels slow)
    endif()
    set_tests_properties("${KVSIM_CD_NAME}/${_t}" PROPERTIES
                         SKIP_RETURN_CODE 77 TIMEOUT ${KVSIM_CD_TIMEOUT} LABELS "${_labels}"
                         FIXTURES_REQUIRED kvsim_tmpdir
                         ENVIRONMENT_MODIFICATION
                         "TMPDIR=set:${KVSIM_CD_TMPDIR};KVSIM_REPLAY_OVERSUBSCRIBE=set:1")
    math(EXPR _count "${_count} + 1")
  endif()
endforeach()
if(_count EQUAL 0)
  kvsim_cd_fail("${KVSIM_CD_EXE} --list named no test")
endif()
