# CPack: `cpack -G DEB` in a build tree makes one Debian package, bulwark, with the CLI,
# the headers, the libraries, the CMake package and the pkg-config files (everything
# `cmake --install` installs, under /usr); `cpack --config CPackSourceConfig.cmake -G TGZ`
# a source tarball. Only the top-level project includes this.
#
# Depends: what dpkg-shlibdeps finds the CLI needs at run time, plus the -dev packages
# an installed component needs to be compiled and linked against (static archives link
# their dependencies in the consumer; see docs/install.md).
set(CPACK_PACKAGE_NAME bulwark)
set(CPACK_PACKAGE_VENDOR "bulwark")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(BULWARK_PACKAGE_CONTACT "bulwark maintainers <bulwark@invalid>" CACHE STRING
    "Maintainer field of the packages cpack makes")
set(CPACK_PACKAGE_CONTACT "${BULWARK_PACKAGE_CONTACT}")
set(CPACK_PACKAGE_FILE_NAME "bulwark-${PROJECT_VERSION}-${CMAKE_SYSTEM_NAME}")
set(CPACK_STRIP_FILES ON)

set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # bulwark_0.1.0_amd64.deb
set(CPACK_DEBIAN_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_PACKAGE_DESCRIPTION
    "The bulwark library (bulwark::core and its integrations), its headers, CMake package and pkg-config files, and the bulwark command-line lab.")
set(deb_depends "")
if(TARGET bulwark_asio)
  list(APPEND deb_depends libasio-dev)
endif()
if(TARGET bulwark_prometheus_cpp)  # its header includes prometheus-cpp's
  list(APPEND deb_depends prometheus-cpp-dev)
endif()
if(BULWARK_STATIC)
  if(TARGET bulwark_redis)
    list(APPEND deb_depends libhiredis-dev "pkgconf | pkg-config")
  endif()
  if(TARGET bulwark_http)
    list(APPEND deb_depends "libcurl4-openssl-dev | libcurl-dev")
  endif()
  if(TARGET bulwark_lab AND NOT BULWARK_FUZZ)
    list(APPEND deb_depends libtomlplusplus-dev)
  endif()
endif()
list(JOIN deb_depends ", " CPACK_DEBIAN_PACKAGE_DEPENDS)

set(CPACK_SOURCE_GENERATOR TGZ)
set(CPACK_SOURCE_PACKAGE_FILE_NAME "bulwark-${PROJECT_VERSION}")
set(CPACK_VERBATIM_VARIABLES ON)  # the values below reach cpack as written
set(CPACK_SOURCE_IGNORE_FILES
    "/\\.git$" "/\\.git/" "/build/" "/build-[^/]*/" "/\\.cache/" "/compile_commands\\.json$"
    "/__pycache__/" "\\.svg\\.tmp$" "~$")
include(CPack)
