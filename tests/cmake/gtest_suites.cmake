# kiln_add_gtest_suites(TARGET PREFIX SOURCES ... [ENVIRONMENT env] [LABELS l...] [SKIPS_WHOLE_SUITES])
#
# Registers a gtest binary with CTest as one entry per test suite (PREFIX.Suite
# runs --gtest_filter=Suite.*), instead of gtest_discover_tests' one process
# per TEST: the unit tests need no process isolation, and ~600 processes each
# paying a start and ctest's bookkeeping cost more than the tests themselves.
# gtest names the failing TEST in the entry's output.
#
# Suites are read from the sources at configure time (TEST, TEST_F, TEST_P,
# TYPED_TEST: the first argument). Two things keep this honest:
# - a suite whose file calls GTEST_SKIP is registered one entry per TEST
#   (gtest_discover_tests), so a skip shows as a skipped ctest entry and
#   never hides inside a passing suite; with SKIPS_WHOLE_SUITES (the CUDA
#   tests: without a GPU every test skips, with one none does) such suites
#   stay one entry, run through gtest_suite.sh, which reports an entry with
#   any skipped test as skipped;
# - PREFIX.every_test_has_an_entry fails when the binary holds a test no entry
#   runs (a suite added without re-running cmake), naming it.
function(kiln_add_gtest_suites target prefix)
  cmake_parse_arguments(ARG "SKIPS_WHOLE_SUITES" "" "SOURCES;ENVIRONMENT;LABELS" ${ARGN})
  set(_grouped)
  set(_isolated)
  foreach(_src ${ARG_SOURCES})
    file(STRINGS ${_src} _lines REGEX "^(TEST|TEST_F|TEST_P|TYPED_TEST|TYPED_TEST_P)\\(")
    file(STRINGS ${_src} _skips REGEX "GTEST_SKIP")
    foreach(_line ${_lines})
      string(REGEX REPLACE "^[A-Z_]+\\( *([A-Za-z0-9_]+).*" "\\1" _suite "${_line}")
      if(_skips AND NOT ARG_SKIPS_WHOLE_SUITES)
        list(APPEND _isolated ${_suite})
      else()
        list(APPEND _grouped ${_suite})
      endif()
    endforeach()
  endforeach()
  list(REMOVE_DUPLICATES _grouped)
  list(REMOVE_DUPLICATES _isolated)
  if(_isolated)
    list(REMOVE_ITEM _grouped ${_isolated})
  endif()
  # A suite's tests: Suite.Name, Instance/Suite.Name/0 (TEST_P), Suite/0.Name (TYPED_TEST).
  set(_all)
  foreach(_suite ${_grouped})
    set(_filter "${_suite}.*:*/${_suite}.*:${_suite}/*")
    string(APPEND _all ":${_filter}")
    if(ARG_SKIPS_WHOLE_SUITES)
      add_test(NAME ${prefix}.${_suite}
               COMMAND bash ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/gtest_suite.sh $<TARGET_FILE:${target}> ${_filter})
      set_tests_properties(${prefix}.${_suite} PROPERTIES SKIP_RETURN_CODE 77)
    else()
      add_test(NAME ${prefix}.${_suite} COMMAND ${target} --gtest_filter=${_filter} --gtest_brief=1)
    endif()
    set_tests_properties(${prefix}.${_suite} PROPERTIES TIMEOUT 600 ENVIRONMENT "${ARG_ENVIRONMENT}"
                                                        LABELS "${ARG_LABELS}")
  endforeach()
  if(_isolated)
    set(_filter)
    foreach(_suite ${_isolated})
      string(APPEND _filter ":${_suite}.*:*/${_suite}.*:${_suite}/*")
    endforeach()
    string(SUBSTRING "${_filter}" 1 -1 _filter)
    string(APPEND _all ":${_filter}")
    # gtest_discover_tests flattens PROPERTIES into one list: a list value keeps its
    # elements only with its semicolons escaped.
    string(REPLACE ";" "\\;" _env "${ARG_ENVIRONMENT}")
    string(REPLACE ";" "\\;" _labels "${ARG_LABELS}")
    gtest_discover_tests(${target} TEST_FILTER "${_filter}" DISCOVERY_TIMEOUT 60
                         PROPERTIES ENVIRONMENT "${_env}" LABELS "${_labels}")
  endif()
  string(SUBSTRING "${_all}" 1 -1 _all)
  add_test(NAME ${prefix}.every_test_has_an_entry
           COMMAND bash ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/gtest_uncovered.sh $<TARGET_FILE:${target}> "${_all}")
  set_tests_properties(${prefix}.every_test_has_an_entry PROPERTIES TIMEOUT 60 LABELS "${ARG_LABELS}")
endfunction()
