# cmake -DROOT=<source dir> -DLIMIT=<lines> -P check_header_length.cmake
#
# Fails if a public header (include/bulwark/*.h, integrations/*/include/bulwark/*/*.h;
# detail/ headers are not public) has more than LIMIT lines, naming each one and its
# length.
if(NOT ROOT OR NOT LIMIT)
  message(FATAL_ERROR "usage: cmake -DROOT=<source dir> -DLIMIT=<lines> -P ${CMAKE_SCRIPT_MODE_FILE}")
endif()
file(GLOB core ${ROOT}/include/bulwark/*.h)
file(GLOB integrations ${ROOT}/integrations/*/include/bulwark/*/*.h)
set(headers ${core} ${integrations})
if(NOT headers)
  message(FATAL_ERROR "no public headers found under ${ROOT}")
endif()
set(over "")
foreach(header IN LISTS headers)
  file(READ ${header} text)
  string(REGEX REPLACE "[^\n]" "" newlines "${text}")
  string(LENGTH "${newlines}" count)
  if(count GREATER LIMIT)
    file(RELATIVE_PATH rel ${ROOT} ${header})
    string(APPEND over "  ${rel}: ${count} lines\n")
  endif()
endforeach()
if(over)
  message(FATAL_ERROR "public headers over ${LIMIT} lines (move the implementation to a "
                      "detail/ header; the public one keeps the documented declarations):\n${over}")
endif()
list(LENGTH headers n)
message(STATUS "${n} public headers, none over ${LIMIT} lines")
