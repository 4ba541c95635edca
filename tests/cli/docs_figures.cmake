# The figures the README quotes and the chart it shows come from `bulwark simulate`:
# regenerate both and fail if the committed ones went stale.
#   -DBULWARK=<path to bulwark> -DSOURCE_DIR=<repo> -DWORK_DIR=<scratch dir>
file(MAKE_DIRECTORY ${WORK_DIR})
execute_process(COMMAND ${BULWARK} simulate --no-timeline --svg ${WORK_DIR}/incident.svg
                OUTPUT_VARIABLE summary RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "bulwark simulate failed (${rc})")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${WORK_DIR}/incident.svg
                        ${SOURCE_DIR}/tools/examples/incident.svg RESULT_VARIABLE differs)
if(differs)
  message(FATAL_ERROR "tools/examples/incident.svg is stale: run "
                      "'bulwark simulate --svg tools/examples/incident.svg'")
endif()
# Every figure in the README's incident table must appear in the summary.
file(READ ${SOURCE_DIR}/README.md readme)
string(REGEX MATCH "requests lost to caller saturation[^\n]*\n[^\n]*\n[^\n]*\n[^\n]*\n[^\n]*" table "${readme}")
string(REGEX MATCHALL "[0-9][0-9,.]*(ms| s|s)?" figures "${table}")
list(LENGTH figures n)
if(n LESS 10)
  message(FATAL_ERROR "could not find the incident table in README.md (${n} figures)")
endif()
foreach(figure IN LISTS figures)
  string(REPLACE " s" "s" figure "${figure}")
  string(FIND "${summary}" "${figure}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "README.md quotes ${figure}, which bulwark simulate no longer prints:\n${summary}")
  endif()
endforeach()

# docs/lab.md's fleet table is what `bulwark simulate --fleet` prints, line for line (a
# build without bulwark::redis refuses the fleet with status 2, and has nothing to check).
execute_process(COMMAND ${BULWARK} simulate --fleet OUTPUT_VARIABLE fleet RESULT_VARIABLE rc)
if(rc EQUAL 0)
  file(READ ${SOURCE_DIR}/docs/lab.md lab)
  string(REPLACE "\n" ";" fleet_lines "${fleet}")
  set(checked 0)
  foreach(line IN LISTS fleet_lines)
    if(line MATCHES "^  (run |single |isolated |shared |goal:)")
      string(FIND "${lab}" "${line}\n" at)
      if(at EQUAL -1)
        message(FATAL_ERROR "docs/lab.md's fleet table is stale: bulwark simulate --fleet now "
                            "prints\n${line}\n(run it and paste its table under \"A fleet\")")
      endif()
      math(EXPR checked "${checked} + 1")
    endif()
  endforeach()
  if(checked LESS 7)
    message(FATAL_ERROR "bulwark simulate --fleet printed no fleet table:\n${fleet}")
  endif()
elseif(NOT rc EQUAL 2)
  message(FATAL_ERROR "bulwark simulate --fleet failed (${rc})")
endif()
