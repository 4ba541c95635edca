# Install rules, the CMake package (find_package(bulwark COMPONENTS ...)), the pkg-config
# files and CPack. Every installed library is a component, of `cmake --install
# --component` and of find_package alike:
#
#   core    bulwark::core    libbulwark          include/bulwark/           bulwark.pc
#   asio    bulwark::asio    libbulwark_asio     include/bulwark/asio/      bulwark-asio.pc
#   redis   bulwark::redis   libbulwark_redis    include/bulwark/redis/     bulwark-redis.pc
#   http    bulwark::http    libbulwark_http     include/bulwark/http/      bulwark-http.pc
#   config  bulwark::config  libbulwark_config   include/bulwark/lab/       bulwark-config.pc
#   prometheus_cpp  bulwark::prometheus_cpp  libbulwark_prometheus_cpp
#                            include/bulwark/prometheus_cpp/  bulwark-prometheus-cpp.pc
#
# and the install-only component `cli` (bin/bulwark). Each library has its own export set
# (bulwark-<component>-targets.cmake), so a consumer loads, and needs the dependencies of,
# only the components it asks for. Dependencies are found on the consumer's machine, by
# name (CMake config, FindCURL, pkg-config): no path of this machine is exported.

set(BULWARK_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/bulwark)
set(BULWARK_PKGCONFIG_DIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# bulwark_install_component(<component> TARGET <target> [HEADERS <dir>])
#
# Installs <target> (and the header directory <dir>, when given) as install component
# <component> into the export set bulwark-<component>-targets, and records it for
# bulwark_install_finish().
function(bulwark_install_component component)
  cmake_parse_arguments(arg "" "TARGET;HEADERS" "" ${ARGN})
  install(TARGETS ${arg_TARGET} EXPORT bulwark-${component}-targets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT ${component}
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT ${component}
    RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT ${component})
  if(arg_HEADERS)
    install(DIRECTORY ${arg_HEADERS} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
            COMPONENT ${component})
  endif()
  set_property(GLOBAL APPEND PROPERTY BULWARK_INSTALLED_COMPONENTS ${component})
  set_property(GLOBAL PROPERTY BULWARK_COMPONENT_TARGET_${component} ${arg_TARGET})
endfunction()

# A pkg-config file for one component, written at install time so that its prefix is
# the one installed to (`cmake --install --prefix`, CPack's /usr), not this build's.
function(bulwark_install_pkgconfig component)
  cmake_parse_arguments(arg "" "NAME;DESCRIPTION" "REQUIRES;REQUIRES_PRIVATE;CFLAGS;LIBS" ${ARGN})
  get_property(target GLOBAL PROPERTY BULWARK_COMPONENT_TARGET_${component})
  get_target_property(pc_lib ${target} OUTPUT_NAME)
  if(BULWARK_STATIC)
    # Only static archives are installed: a consumer that links without --static must
    # still get what they need, so the private requirements are public ones.
    list(APPEND arg_REQUIRES ${arg_REQUIRES_PRIVATE})
    set(arg_REQUIRES_PRIVATE "")
  endif()
  list(JOIN arg_REQUIRES ", " pc_requires)
  list(JOIN arg_REQUIRES_PRIVATE ", " pc_requires_private)
  list(JOIN arg_CFLAGS " " pc_cflags)
  list(JOIN arg_LIBS " " pc_libs)
  if(pc_cflags)
    string(PREPEND pc_cflags " ")
  endif()
  if(pc_libs)
    string(PREPEND pc_libs " ")
  endif()
  set(pc_name ${arg_NAME})
  set(pc_description ${arg_DESCRIPTION})
  # Left for the install-time configure_file.
  set(pc_prefix "@CMAKE_INSTALL_PREFIX@")
  set(in ${PROJECT_BINARY_DIR}/pkgconfig/${arg_NAME}.pc.in)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/bulwark.pc.in ${in} @ONLY)
  install(CODE "
    set(pc \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${BULWARK_PKGCONFIG_DIR}/${arg_NAME}.pc\")
    message(STATUS \"Installing: \${pc}\")
    configure_file(\"${in}\" \"\${pc}\" @ONLY)
    list(APPEND CMAKE_INSTALL_MANIFEST_FILES \"\${pc}\")"
    COMPONENT ${component})
endfunction()

# Called once, at the end of the top-level CMakeLists.txt, when every target exists.
function(bulwark_install_finish)
  include(CMakePackageConfigHelpers)
  get_property(components GLOBAL PROPERTY BULWARK_INSTALLED_COMPONENTS)
  # The order the package loads them in: each after those it links.
  set(ordered "")
  foreach(c IN ITEMS core asio redis http config prometheus_cpp)
    if(c IN_LIST components)
      list(APPEND ordered ${c})
    endif()
  endforeach()

  foreach(c IN LISTS ordered)
    install(EXPORT bulwark-${c}-targets NAMESPACE bulwark:: DESTINATION ${BULWARK_CMAKE_DIR}
            COMPONENT ${c})
    # A build-tree export too, so a consumer can use an uninstalled build.
    export(EXPORT bulwark-${c}-targets NAMESPACE bulwark::
           FILE ${PROJECT_BINARY_DIR}/bulwark-${c}-targets.cmake)
  endforeach()

  # What the package config needs to know of this build (cmake/bulwarkConfig.cmake.in).
  set(BULWARK_CONFIG_COMPONENTS ${ordered})
  set(BULWARK_CONFIG_STATIC ${BULWARK_STATIC})
  set(BULWARK_CONFIG_HTTP_USES_ASIO OFF)
  if("http" IN_LIST ordered AND "asio" IN_LIST ordered)
    set(BULWARK_CONFIG_HTTP_USES_ASIO ON)
  endif()
  set(BULWARK_CONFIG_LAB_USES_REDIS OFF)
  if("config" IN_LIST ordered AND "redis" IN_LIST ordered)
    set(BULWARK_CONFIG_LAB_USES_REDIS ON)
  endif()
  set(BULWARK_CONFIG_LAB_USES_TOML ON)
  if(BULWARK_FUZZ)  # toml++ compiled into the lab, header-only
    set(BULWARK_CONFIG_LAB_USES_TOML OFF)
  endif()
  configure_package_config_file(cmake/bulwarkConfig.cmake.in
    ${PROJECT_BINARY_DIR}/bulwarkConfig.cmake
    INSTALL_DESTINATION ${BULWARK_CMAKE_DIR})
  # Before 1.0 a minor release may change the API: find_package(bulwark 0.1) accepts
  # 0.1.x only. From 1.0 on, any 1.x.
  if(PROJECT_VERSION_MAJOR EQUAL 0)
    set(compatibility SameMinorVersion)
  else()
    set(compatibility SameMajorVersion)
  endif()
  write_basic_package_version_file(${PROJECT_BINARY_DIR}/bulwarkConfigVersion.cmake
    COMPATIBILITY ${compatibility})
  install(FILES ${PROJECT_BINARY_DIR}/bulwarkConfig.cmake
                ${PROJECT_BINARY_DIR}/bulwarkConfigVersion.cmake
          DESTINATION ${BULWARK_CMAKE_DIR} COMPONENT core)

  # pkg-config: one file per component, Requires naming the others and the dependencies'
  # own .pc files (Debian ships hiredis.pc, libcurl.pc, tomlplusplus.pc; Asio has none).
  bulwark_install_pkgconfig(core NAME bulwark
    DESCRIPTION "${PROJECT_DESCRIPTION} (compile with -std=c++20)")
  if("asio" IN_LIST ordered)
    bulwark_install_pkgconfig(asio NAME bulwark-asio
      DESCRIPTION "bulwark's pipeline as C++20 coroutines over standalone Asio (libasio-dev)"
      REQUIRES bulwark CFLAGS -DASIO_STANDALONE LIBS -pthread)
  endif()
  if("redis" IN_LIST ordered)
    bulwark_install_pkgconfig(redis NAME bulwark-redis
      DESCRIPTION "bulwark's breaker decisions shared through Redis (hiredis)"
      REQUIRES bulwark REQUIRES_PRIVATE hiredis)
  endif()
  if("http" IN_LIST ordered)
    set(requires bulwark)
    if(BULWARK_CONFIG_HTTP_USES_ASIO)
      list(APPEND requires bulwark-asio)
    endif()
    bulwark_install_pkgconfig(http NAME bulwark-http
      DESCRIPTION "bulwark's resilient HTTP client over libcurl"
      REQUIRES ${requires} REQUIRES_PRIVATE libcurl)
  endif()
  if("config" IN_LIST ordered)
    set(private "")
    if(BULWARK_CONFIG_LAB_USES_TOML)
      list(APPEND private tomlplusplus)
    endif()
    if(BULWARK_CONFIG_LAB_USES_REDIS)
      list(APPEND private bulwark-redis)
    endif()
    bulwark_install_pkgconfig(config NAME bulwark-config
      DESCRIPTION "bulwark's configuration loading from TOML, simulation and replay (the lab)"
      REQUIRES bulwark REQUIRES_PRIVATE ${private} LIBS -pthread)
  endif()
  if("prometheus_cpp" IN_LIST ordered)
    bulwark_install_pkgconfig(prometheus_cpp NAME bulwark-prometheus-cpp
      DESCRIPTION "bulwark's metrics through an application's prometheus-cpp Registry"
      REQUIRES bulwark prometheus-cpp-core)
  endif()
endfunction()
