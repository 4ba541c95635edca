# bulwark_add_integration(<name> <source>...)
#
# An integration beside the core: the library bulwark::<name> (built as bulwark_<name>,
# installed as libbulwark_<name>), from the given sources of integrations/<name>/, its
# public headers in that directory's include/, linked PUBLIC to bulwark::core, with the
# project's warnings. Installed as the install and find_package component <name>: its own
# export set (bulwark-<name>-targets) and pkg-config file (bulwark_install_component,
# cmake/BulwarkInstall.cmake). The caller adds the integration's own dependencies with
# target_link_libraries (keyword form).
function(bulwark_add_integration name)
  set(target bulwark_${name})
  list(TRANSFORM ARGN PREPEND ${CMAKE_CURRENT_SOURCE_DIR}/)
  add_library(${target} ${ARGN})
  add_library(bulwark::${name} ALIAS ${target})
  set_target_properties(${target} PROPERTIES
    EXPORT_NAME ${name}
    OUTPUT_NAME bulwark_${name}
    VERSION ${PROJECT_VERSION}
    SOVERSION ${PROJECT_VERSION_MAJOR})
  target_compile_features(${target} PUBLIC cxx_std_20)
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_link_libraries(${target} PUBLIC bulwark::core)
  bulwark_set_warnings(${target})
  if(BULWARK_INSTALL)
    bulwark_install_component(${name} TARGET ${target}
                              HEADERS ${CMAKE_CURRENT_SOURCE_DIR}/include/bulwark)
  endif()
endfunction()
