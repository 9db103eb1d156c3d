# Run by `cmake --install` (deploy/CMakeLists.txt): fills the systemd units in for the prefix
# this install runs with, and installs them. CMAKE_INSTALL_PREFIX is the install's own here;
# file(INSTALL) adds $DESTDIR, the paths written into the units do not.
function(kiln_full_path out path)
  if(IS_ABSOLUTE "${path}")
    set(${out} "${path}" PARENT_SCOPE)
  else()
    set(${out} "${CMAKE_INSTALL_PREFIX}/${path}" PARENT_SCOPE)
  endif()
endfunction()

kiln_full_path(KILN_BIN_DIR "${KILN_INSTALL_BINDIR}")
kiln_full_path(KILN_DOC_DIR "${KILN_INSTALL_DOCDIR}")
kiln_full_path(unit_dir "${KILN_SYSTEMD_UNIT_DIR}")
foreach(unit kilnd.service kilnd.socket)
  configure_file("${KILN_DEPLOY_SOURCE_DIR}/${unit}" "${KILN_DEPLOY_BINARY_DIR}/installed/${unit}" @ONLY)
  file(INSTALL "${KILN_DEPLOY_BINARY_DIR}/installed/${unit}" DESTINATION "${unit_dir}")
endforeach()
