# Relations between the install directories, relative so an installed prefix can be moved:
# shared/runtime_paths.cpp resolves them against the running executable or libwaste.so.
# (GNUInstallDirs' directories are relative unless a user sets them absolute; then the
# relation is computed between the absolute paths, which is still right for that prefix.)
function(waste_relative out from to)
  foreach(v from to)
    if(NOT IS_ABSOLUTE "${${v}}")
      set(${v} "/prefix/${${v}}")
    endif()
  endforeach()
  file(RELATIVE_PATH rel "${from}" "${to}")
  set(${out} "${rel}" PARENT_SCOPE)
endfunction()
set(WASTE_INSTALL_DATADIR "${CMAKE_INSTALL_DATADIR}/waste")
waste_relative(WASTE_BIN_TO_DATA "${CMAKE_INSTALL_BINDIR}" "${WASTE_INSTALL_DATADIR}")
waste_relative(WASTE_LIB_TO_DATA "${CMAKE_INSTALL_LIBDIR}" "${WASTE_INSTALL_DATADIR}")
waste_relative(WASTE_LIB_TO_BIN "${CMAKE_INSTALL_LIBDIR}" "${CMAKE_INSTALL_BINDIR}")
