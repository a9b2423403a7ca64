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
# kiln_discovered_test_properties(TARGET PROPERTY VARIABLE ...): sets each
# PROPERTY to the list in VARIABLE (ENVIRONMENT, LABELS) on the tests
# gtest_discover_tests found in TARGET. gtest_discover_tests' own PROPERTIES
# cannot carry lists: it hands them to its discovery step as one flat list, so
# ENVIRONMENT "A=1;B=2" arrived as ENVIRONMENT A=1 plus a property named B=2
# (the parity tests ran without KILN_POISON_ALLOC that way). A ctest include
# file read after the discovered list (${TARGET}_TESTS) sets them instead.
function(kiln_discovered_test_properties target)
  set(_props "")
  set(_args ${ARGN})
  while(_args)
    list(POP_FRONT _args _name _var)
    string(APPEND _props " ${_name} [==[${${_var}}]==]")
  endwhile()
  set(_file "${CMAKE_CURRENT_BINARY_DIR}/${target}_discovered_properties.cmake")
  file(WRITE "${_file}" "if(${target}_TESTS)\n  set_tests_properties(\${${target}_TESTS} PROPERTIES${_props})\nendif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${_file}")
endfunction()

# The gtest filter of one suite: Suite.Name, Instance/Suite.Name/0 (TEST_P), Suite/0.Name (TYPED_TEST).
function(kiln_suite_filter out suite)
  set(${out} "${suite}.*:*/${suite}.*:${suite}/*" PARENT_SCOPE)
endfunction()

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
  set(_all)
  foreach(_suite ${_grouped})
    kiln_suite_filter(_filter ${_suite})
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
      kiln_suite_filter(_one ${_suite})
      string(APPEND _filter ":${_one}")
    endforeach()
    string(SUBSTRING "${_filter}" 1 -1 _filter)
    string(APPEND _all ":${_filter}")
    gtest_discover_tests(${target} TEST_FILTER "${_filter}" DISCOVERY_TIMEOUT 60)
    kiln_discovered_test_properties(${target} ENVIRONMENT ARG_ENVIRONMENT LABELS ARG_LABELS)
  endif()
  string(SUBSTRING "${_all}" 1 -1 _all)
  add_test(NAME ${prefix}.every_test_has_an_entry
           COMMAND bash ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/gtest_uncovered.sh $<TARGET_FILE:${target}> "${_all}")
  set_tests_properties(${prefix}.every_test_has_an_entry PROPERTIES TIMEOUT 60 LABELS "${ARG_LABELS}")
endfunction()
