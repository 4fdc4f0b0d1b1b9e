# The kvsim Python package (runtime/api/python/kvsim: ctypes over libkvsim.so, no compiled
# extension), installed as <prefix>/lib/python3/dist-packages/kvsim (Debian's layout of python3
# packages), with a generated kvsim/_build_config.py recording the installed library's directory
# and the kvsim.h version. Both paths are those of the install-time prefix (`cmake --install
# --prefix P`), so they are computed when installing, not when configuring.
include(GNUInstallDirs)
set(KVSIM_PYTHON_INSTALL_DIR "lib/python3/dist-packages" CACHE STRING
    "Where the kvsim Python package is installed (relative to the prefix, or absolute)")

set(_kvsim_py_src ${CMAKE_CURRENT_LIST_DIR})
install(DIRECTORY ${_kvsim_py_src}/kvsim/ DESTINATION ${KVSIM_PYTHON_INSTALL_DIR}/kvsim
        FILES_MATCHING PATTERN "*.py"
        PATTERN "_build_config.py" EXCLUDE
        PATTERN "__pycache__" EXCLUDE)

# The configure-time facts, then the install-time code (a bracket argument: nothing in it is
# expanded now).
install(CODE "
set(_kvsim_py_template \"${_kvsim_py_src}/_build_config.py.in\")
set(_kvsim_py_pkgdir \"${KVSIM_PYTHON_INSTALL_DIR}/kvsim\")
set(_kvsim_py_libdir \"${CMAKE_INSTALL_LIBDIR}\")
set(KVSIM_PY_SONAME \"$<TARGET_SONAME_FILE_NAME:kvsim_shared>\")
set(KVSIM_PY_VERSION_MAJOR ${PROJECT_VERSION_MAJOR})
set(KVSIM_PY_VERSION_MINOR ${PROJECT_VERSION_MINOR})
set(KVSIM_PY_VERSION_PATCH ${PROJECT_VERSION_PATCH})
")
install(CODE [==[
foreach(_v _kvsim_py_pkgdir _kvsim_py_libdir)
  if(NOT IS_ABSOLUTE "${${_v}}")
    set(${_v} "${CMAKE_INSTALL_PREFIX}/${${_v}}")
  endif()
endforeach()
# The library's final directory (without DESTDIR), as a Python string literal's contents.
string(REPLACE "\\" "\\\\" KVSIM_PY_LIBDIR "${_kvsim_py_libdir}")
string(REPLACE "\"" "\\\"" KVSIM_PY_LIBDIR "${KVSIM_PY_LIBDIR}")
set(_kvsim_py_out "$ENV{DESTDIR}${_kvsim_py_pkgdir}/_build_config.py")
message(STATUS "Installing: ${_kvsim_py_out}")
configure_file("${_kvsim_py_template}" "${_kvsim_py_out}" @ONLY)
list(APPEND CMAKE_INSTALL_MANIFEST_FILES "${_kvsim_py_out}")
]==])
