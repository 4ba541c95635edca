# The figures the README and docs/lab.md quote and the chart they show come from the
# commands next to them: regenerate them and fail if the committed ones went stale.
#   -DBULWARK=<path to bulwark> -DSOURCE_DIR=<repo> -DWORK_DIR=<scratch dir>
#   [-DPYTHON=<python3>: also docs/lab.md's calibration of the reviews trace]
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

file(READ ${SOURCE_DIR}/docs/lab.md lab)

# docs/lab.md's incident summary is what `bulwark simulate --no-timeline` prints, line
# for line.
string(REGEX MATCH "\nSummary  [^`]*page latency p99[^\n]*\n" lab_summary "${lab}")
string(REPLACE "\n" ";" lab_summary_lines "${lab_summary}")
set(checked 0)
foreach(line IN LISTS lab_summary_lines)
  if(line STREQUAL "")
    continue()
  endif()
  string(FIND "${summary}" "${line}\n" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "docs/lab.md's incident summary is stale: bulwark simulate --no-timeline "
                        "no longer prints\n${line}\nbut\n${summary}")
  endif()
  math(EXPR checked "${checked} + 1")
endforeach()
if(checked LESS 15)
  message(FATAL_ERROR "could not find the incident summary in docs/lab.md (${checked} lines)")
endif()

# docs/lab.md's calibration of the reviews service's trace is what `bulwark calibrate`
# prints for the trace tools/examples/make_reviews_trace.py writes, line for line.
if(PYTHON)
  execute_process(COMMAND ${PYTHON} ${SOURCE_DIR}/tools/examples/make_reviews_trace.py
                  OUTPUT_FILE ${WORK_DIR}/reviews.csv RESULT_VARIABLE rc)
  if(rc)
    message(FATAL_ERROR "make_reviews_trace.py failed (${rc})")
  endif()
  execute_process(COMMAND ${BULWARK} calibrate reviews.csv --toml reviews.toml
                          --scenario reviews-scenario.toml
                  WORKING_DIRECTORY ${WORK_DIR} OUTPUT_VARIABLE calibration RESULT_VARIABLE rc)
  if(rc)
    message(FATAL_ERROR "bulwark calibrate failed (${rc})")
  endif()
  string(REGEX MATCH "\nCalibration of reviews.csv[^`]*Scenario written to reviews-scenario.toml\n"
               lab_calibration "${lab}")
  # Its reasons hold semicolons, CMake's list separator: compared with them replaced.
  string(REPLACE ";" "<semicolon>" lab_calibration "${lab_calibration}")
  string(REPLACE ";" "<semicolon>" calibration "${calibration}")
  string(REPLACE "\n" ";" lab_calibration_lines "${lab_calibration}")
  set(checked 0)
  foreach(line IN LISTS lab_calibration_lines)
    if(line STREQUAL "")
      continue()
    endif()
    string(FIND "${calibration}" "${line}\n" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "docs/lab.md's calibration of reviews.csv is stale: bulwark calibrate "
                          "no longer prints\n${line}\nbut\n${calibration}")
    endif()
    math(EXPR checked "${checked} + 1")
  endforeach()
  if(checked LESS 25)
    message(FATAL_ERROR "could not find the calibration in docs/lab.md (${checked} lines)")
  endif()
endif()

# docs/lab.md's fleet table is what `bulwark simulate --fleet` prints, line for line (a
# build without bulwark::redis refuses the fleet with status 2, and has nothing to check).
execute_process(COMMAND ${BULWARK} simulate --fleet OUTPUT_VARIABLE fleet RESULT_VARIABLE rc)
if(rc EQUAL 0)
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
