# One packaging check (ctest runs it as cmake -P):
#   -DMODE=install|find_package|pkg_config|components|add_subdirectory|deb
#   -DSOURCE_DIR=... -DBINARY_DIR=... -DWORK_DIR=... -DPREFIX=<the shared install>
#   -DCOMPONENTS=<components beside core that were built, ;-separated as |>
#   -DCXX=<compiler> [-DLAUNCHER=<ccache>]
#
# install          cmake --install of the build tree into PREFIX (the fixture the next three
#                  use): every library, header, the CLI, CMake package and .pc files, and
#                  no path of this machine in the exported targets.
# find_package     a consumer through find_package(bulwark COMPONENTS ...), one program
#                  per component linking only that component's target.
# pkg_config       the same programs compiled by hand with `pkg-config --cflags --libs`
#                  (but the Asio one, when bulwark-http brings bulwark-asio's flags).
# components       a component that does not exist, was not built, was not installed or
#                  whose dependency is missing fails find_package with a message naming
#                  it and its Debian package.
# add_subdirectory a consumer that vendors the source tree.
# deb              cpack -G DEB: the package's files and Depends; and the source tarball.
cmake_policy(VERSION 3.25)
string(REPLACE "|" ";" COMPONENTS "${COMPONENTS}")
list(REMOVE_ITEM COMPONENTS "")
set(build_args --parallel 2)
if(NOT CMAKE_CPACK_COMMAND)
  get_filename_component(cmake_bin ${CMAKE_COMMAND} DIRECTORY)
  set(CMAKE_CPACK_COMMAND ${cmake_bin}/cpack)
endif()

function(run step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(rc)
    message(FATAL_ERROR "${MODE}: ${step} failed (${rc}):\n${ARGN}\n${out}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()

function(expect_contains what text pattern)
  string(FIND "${text}" "${pattern}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${MODE}: ${what}: expected \"${pattern}\" in:\n${text}")
  endif()
endfunction()

set(consumer_args -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=${CXX})
if(LAUNCHER)
  list(APPEND consumer_args -DCMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER})
endif()

# Configures, builds and runs tests/packaging/consumer with the given components.
function(build_and_run_consumer components)
  list(JOIN components "|" joined)
  run(configure ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/packaging/consumer -B ${WORK_DIR}/build
      ${consumer_args} -DCONSUME_COMPONENTS=${joined} ${ARGN})
  run(build ${CMAKE_COMMAND} --build ${WORK_DIR}/build ${build_args})
  run("run consumer" ${WORK_DIR}/build/consumer)
  foreach(c IN LISTS components)
    run("run consumer_${c}" ${WORK_DIR}/build/consumer_${c})
  endforeach()
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

if(MODE STREQUAL "install")
  file(REMOVE_RECURSE ${PREFIX})
  run(install ${CMAKE_COMMAND} --install ${BINARY_DIR} --prefix ${PREFIX})
  set(expected bin/bulwark lib/libbulwark.a include/bulwark/version.h
      include/bulwark/circuit_breaker.h lib/cmake/bulwark/bulwarkConfig.cmake
      lib/cmake/bulwark/bulwarkConfigVersion.cmake lib/cmake/bulwark/bulwark-core-targets.cmake
      lib/pkgconfig/bulwark.pc share/bulwark/examples/make_reviews_trace.py
      share/bulwark/examples/bulwark.rules.yml)
  foreach(c IN LISTS COMPONENTS)
    string(REPLACE "_" "-" pc ${c})  # prometheus_cpp: bulwark-prometheus-cpp.pc
    list(APPEND expected lib/cmake/bulwark/bulwark-${c}-targets.cmake lib/pkgconfig/bulwark-${pc}.pc)
  endforeach()
  if(config IN_LIST COMPONENTS)
    list(APPEND expected lib/libbulwark_config.a include/bulwark/lab/config.h
         include/bulwark/config/config.h include/bulwark/config/http.h
         include/bulwark/config/redis.h)
  endif()
  foreach(f IN LISTS expected)
    if(NOT EXISTS ${PREFIX}/${f})
      message(FATAL_ERROR "install: ${f} was not installed")
    endif()
  endforeach()
  # The exported targets name their dependencies (CURL::libcurl, PkgConfig::...), never a
  # file of this machine, and nothing of the build or source tree.
  file(GLOB targets ${PREFIX}/lib/cmake/bulwark/*-targets.cmake)
  foreach(f IN LISTS targets)
    file(STRINGS ${f} lines REGEX "INTERFACE_(LINK_LIBRARIES|INCLUDE_DIRECTORIES)")
    foreach(line IN LISTS lines)
      if(line MATCHES "(\"|;)/" OR line MATCHES "${BINARY_DIR}|${SOURCE_DIR}")
        message(FATAL_ERROR "install: ${f} names a path of this machine:\n${line}")
      endif()
    endforeach()
  endforeach()
  run("bulwark --version" ${PREFIX}/bin/bulwark --version)
  file(STRINGS ${SOURCE_DIR}/include/bulwark/version.h version REGEX "^#define BULWARK_VERSION_STRING ")
  string(REGEX REPLACE ".*\"(.*)\".*" "\\1" version "${version}")
  expect_contains("bulwark --version" "${out}" "bulwark lab ${version}")

elseif(MODE STREQUAL "find_package")
  build_and_run_consumer("${COMPONENTS}" -DBULWARK_CONSUME=find_package
                         -DCMAKE_PREFIX_PATH=${PREFIX})

elseif(MODE STREQUAL "pkg_config")
  set(ENV{PKG_CONFIG_PATH} ${PREFIX}/lib/pkgconfig)
  find_program(PKG_CONFIG NAMES pkg-config pkgconf REQUIRED)
  set(programs consumer:bulwark)
  foreach(c IN LISTS COMPONENTS)
    # main_asio.cc costs more than the rest together (Asio's headers) and checks no flag
    # that bulwark-http's Requires on bulwark-asio does not: left to find_package.
    if(NOT (c STREQUAL "asio" AND "http" IN_LIST COMPONENTS))
      string(REPLACE "_" "-" pc ${c})
      list(APPEND programs consumer_${c}:bulwark-${pc})
    endif()
  endforeach()
  foreach(entry IN LISTS programs)
    string(REPLACE ":" ";" entry ${entry})
    list(GET entry 0 program)
    list(GET entry 1 module)
    run("pkg-config --cflags ${module}" ${PKG_CONFIG} --cflags ${module})
    separate_arguments(cflags UNIX_COMMAND "${out}")
    run("pkg-config --libs ${module}" ${PKG_CONFIG} --libs ${module})
    separate_arguments(libs UNIX_COMMAND "${out}")
    string(REPLACE "consumer_" "main_" source ${program})
    string(REPLACE "consumer" "main" source ${source})
    # As a Makefile would: compile with --cflags, link with --libs after the objects.
    run("compile ${program}" ${LAUNCHER} ${CXX} -std=c++20 -O1 ${cflags} -c
        ${SOURCE_DIR}/tests/packaging/consumer/${source}.cc -o ${WORK_DIR}/${program}.o)
    run("link ${program}" ${CXX} ${WORK_DIR}/${program}.o -o ${WORK_DIR}/${program} ${libs})
    run("run ${program}" ${WORK_DIR}/${program})
  endforeach()
  run("pkg-config --modversion" ${PKG_CONFIG} --modversion bulwark)
  file(STRINGS ${SOURCE_DIR}/include/bulwark/version.h version REGEX "^#define BULWARK_VERSION_STRING ")
  string(REGEX REPLACE ".*\"(.*)\".*" "\\1" version "${version}")
  expect_contains("pkg-config --modversion" "${out}" "${version}")

elseif(MODE STREQUAL "components")
  # Configures the probe project and expects it to fail with every `patterns`.
  function(expect_failure name want patterns)
    set(dir ${WORK_DIR}/${name})
    execute_process(
      COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/packaging/components -B ${dir}
              -DCMAKE_CXX_COMPILER=${CXX} "-DWANT=${want}" ${ARGN}
      RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
    if(NOT rc)
      message(FATAL_ERROR "components: find_package(bulwark COMPONENTS ${want}) (${name}) succeeded")
    endif()
    string(REGEX REPLACE "[ \t\r\n]+" " " flat "${out}")  # CMake wraps long messages
    foreach(pattern IN LISTS patterns)
      expect_contains("${name}" "${flat}" "${pattern}")
    endforeach()
    message(STATUS "${name}: failed as expected")
  endfunction()

  expect_failure(unknown "core;nosuch" "component \"nosuch\" does not exist"
                 -DCMAKE_PREFIX_PATH=${PREFIX})

  # Installed without a component: only core's files in the prefix.
  run("install core only" ${CMAKE_COMMAND} --install ${BINARY_DIR} --prefix ${WORK_DIR}/core-only
      --component core)
  if(redis IN_LIST COMPONENTS)
    expect_failure(not_installed "redis" "component \"redis\" was built but not installed;--component redis"
                   -DCMAKE_PREFIX_PATH=${WORK_DIR}/core-only)
    # A consumer machine without hiredis.pc.
    file(MAKE_DIRECTORY ${WORK_DIR}/no-pc)
    set(ENV{PKG_CONFIG_LIBDIR} ${WORK_DIR}/no-pc)
    set(ENV{PKG_CONFIG_PATH} ${WORK_DIR}/no-pc)
    expect_failure(dependency_missing "redis" "component \"redis\" needs hiredis;libhiredis-dev"
                   -DCMAKE_PREFIX_PATH=${PREFIX})
    unset(ENV{PKG_CONFIG_LIBDIR})
    unset(ENV{PKG_CONFIG_PATH})
  endif()

  # A bulwark built without the integrations: configured only (its package config in
  # the build tree is enough to ask it), nothing is compiled.
  run("configure a bulwark without integrations" ${CMAKE_COMMAND} -S ${SOURCE_DIR}
      -B ${WORK_DIR}/bare -DCMAKE_CXX_COMPILER=${CXX} -DBULWARK_ASIO=OFF -DBULWARK_REDIS=OFF
      -DBULWARK_HTTP=OFF -DBULWARK_PROMETHEUS_CPP=OFF -DBULWARK_TOOLS=OFF -DBULWARK_TESTS=OFF -DBULWARK_BENCHMARKS=OFF
      -DBULWARK_EXAMPLES=OFF)
  foreach(entry IN ITEMS http:libcurl4-openssl-dev asio:libasio-dev redis:libhiredis-dev
                         config:libtomlplusplus-dev prometheus_cpp:prometheus-cpp-dev)
    string(REPLACE ":" ";" entry ${entry})
    list(GET entry 0 c)
    list(GET entry 1 deb)
    expect_failure(without_${c} "${c}"
                   "component \"${c}\" is not available: this bulwark was built without bulwark::${c};apt-get install ${deb}"
                   -Dbulwark_DIR=${WORK_DIR}/bare)
  endforeach()

elseif(MODE STREQUAL "add_subdirectory")
  set(args -DBULWARK_CONSUME=add_subdirectory -DBULWARK_SOURCE_DIR=${SOURCE_DIR})
  # Vendored: asio and redis, as a service would (http and the lab are covered installed).
  set(vendored "")
  foreach(c IN ITEMS asio redis)
    if(c IN_LIST COMPONENTS)
      list(APPEND vendored ${c})
      string(TOUPPER ${c} C)
      list(APPEND args -DBULWARK_${C}=ON)
    endif()
  endforeach()
  build_and_run_consumer("${vendored}" ${args})

elseif(MODE STREQUAL "deb")
  run("cpack -G DEB" ${CMAKE_COMMAND} -E chdir ${BINARY_DIR}
      ${CMAKE_CPACK_COMMAND} -G DEB -B ${WORK_DIR} --config ${BINARY_DIR}/CPackConfig.cmake)
  file(GLOB deb ${WORK_DIR}/*.deb)
  if(NOT deb)
    message(FATAL_ERROR "deb: cpack made no .deb:\n${out}")
  endif()
  run("dpkg-deb -c" dpkg-deb -c ${deb})
  set(contents "${out}")
  foreach(f IN ITEMS ./usr/bin/bulwark ./usr/lib/libbulwark.a ./usr/include/bulwark/version.h
                     ./usr/lib/cmake/bulwark/bulwarkConfig.cmake ./usr/lib/pkgconfig/bulwark.pc
                     ./usr/share/bulwark/examples/make_reviews_trace.py)
    expect_contains("dpkg-deb -c" "${contents}" "${f}")
  endforeach()
  foreach(c IN LISTS COMPONENTS)
    string(REPLACE "_" "-" pc ${c})
    expect_contains("dpkg-deb -c" "${contents}" "./usr/lib/pkgconfig/bulwark-${pc}.pc")
    expect_contains("dpkg-deb -c" "${contents}" "./usr/lib/libbulwark_${c}.a")
  endforeach()
  run("dpkg-deb -f" dpkg-deb -f ${deb} Package Version Depends)
  expect_contains("dpkg-deb -f" "${out}" "Package: bulwark")
  set(depends_on libc6 libstdc++6)
  foreach(entry IN ITEMS asio:libasio-dev redis:libhiredis-dev http:libcurl4-openssl-dev
                         config:libtomlplusplus-dev config:libtomlplusplus3
                         prometheus_cpp:prometheus-cpp-dev)
    string(REPLACE ":" ";" entry ${entry})
    list(GET entry 0 c)
    if(c IN_LIST COMPONENTS)
      list(GET entry 1 package)
      list(APPEND depends_on ${package})
    endif()
  endforeach()
  foreach(d IN LISTS depends_on)
    expect_contains("Depends" "${out}" "${d}")
  endforeach()
  # The .pc files in the package point at /usr, where dpkg puts them.
  run("dpkg-deb -x" dpkg-deb -x ${deb} ${WORK_DIR}/root)
  file(READ ${WORK_DIR}/root/usr/lib/pkgconfig/bulwark.pc pc)
  expect_contains("bulwark.pc" "${pc}" "prefix=/usr\n")

  run("cpack source TGZ" ${CMAKE_COMMAND} -E chdir ${BINARY_DIR}
      ${CMAKE_CPACK_COMMAND} -G TGZ -B ${WORK_DIR}/source --config ${BINARY_DIR}/CPackSourceConfig.cmake)
  file(GLOB tgz ${WORK_DIR}/source/*.tar.gz)
  run("tar -tzf" ${CMAKE_COMMAND} -E tar tzf ${tgz})
  expect_contains("source tarball" "${out}" "/include/bulwark/version.h")
  expect_contains("source tarball" "${out}" "/cmake/bulwarkConfig.cmake.in")
  if(out MATCHES "/build/|/\\.git/")
    message(FATAL_ERROR "deb: the source tarball holds a build tree or .git:\n${out}")
  endif()

else()
  message(FATAL_ERROR "unknown MODE ${MODE}")
endif()
