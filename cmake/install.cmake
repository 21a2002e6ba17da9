# What `cmake --install BUILD --prefix P` puts under P, and the Debian package made of it.
#   bin/waste, bin/waste-ctl, bin/waste-ioserver
#   lib/libwaste.so.0 -> libwaste.so.X.Y.Z, lib/libwaste.so, lib/libwaste.a
#   include/waste.h
#   lib/pkgconfig/waste.pc, lib/cmake/waste/wasteConfig.cmake (+ ConfigVersion)
#   share/waste/{presets,chat,grammar}
include(CMakePackageConfigHelpers)

set(WASTE_SHIPPED_PROGRAMS waste)
foreach(t waste-ctl waste-ioserver)
  if(TARGET ${t})
    list(APPEND WASTE_SHIPPED_PROGRAMS ${t})
  endif()
endforeach()
install(TARGETS ${WASTE_SHIPPED_PROGRAMS} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# `ninja waste-shipped`: what the install ships (programs and libwaste), without the tests;
# scripts/quickstart.sh builds this.
add_custom_target(waste-shipped DEPENDS ${WASTE_SHIPPED_PROGRAMS} waste_capi waste_static)
install(TARGETS waste_capi waste_static
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} NAMELINK_COMPONENT Unspecified
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  PUBLIC_HEADER DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# --strip (and cpack, CPACK_STRIP_FILES) strips programs and libwaste.so; the archive's debug
# info (most of its size) goes too.
install(CODE "if(CMAKE_INSTALL_DO_STRIP)
  execute_process(COMMAND \"${CMAKE_STRIP}\" --strip-debug
    \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/libwaste.a\")
endif()")
foreach(sub presets chat grammar)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/configs/${sub} DESTINATION ${WASTE_INSTALL_DATADIR})
endforeach()

# What a host linking libwaste.a also needs (the engine's system libraries); the shared
# library records its own.
set(WASTE_STATIC_SYSTEM_LIBS zmq icui18n icuuc uring png jpeg spdlog fmt stdc++ m pthread rt dl)
list(TRANSFORM WASTE_STATIC_SYSTEM_LIBS PREPEND "-l" OUTPUT_VARIABLE WASTE_PC_LIBS_PRIVATE)
list(JOIN WASTE_PC_LIBS_PRIVATE " " WASTE_PC_LIBS_PRIVATE)

# pkg-config: prefix from the .pc file's own location, so a moved prefix still works.
file(RELATIVE_PATH WASTE_PC_TO_PREFIX "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
string(REGEX REPLACE "/$" "" WASTE_PC_TO_PREFIX "${WASTE_PC_TO_PREFIX}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/waste.pc.in ${PROJECT_BINARY_DIR}/waste.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/waste.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# find_package(waste): waste::waste (libwaste.so) and waste::waste_static (libwaste.a).
set(WASTE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/waste)
file(RELATIVE_PATH WASTE_CMAKE_TO_PREFIX "/prefix/${WASTE_CMAKE_DIR}" "/prefix")
configure_file(${PROJECT_SOURCE_DIR}/cmake/wasteConfig.cmake.in ${PROJECT_BINARY_DIR}/wasteConfig.cmake @ONLY)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/wasteConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/wasteConfig.cmake ${PROJECT_BINARY_DIR}/wasteConfigVersion.cmake
  DESTINATION ${WASTE_CMAKE_DIR})

# cpack -G DEB (run in the build directory): waste_<version>_<arch>.deb into /usr, its Depends
# computed by dpkg-shlibdeps from the binaries (Debian 12 package names).
set(CPACK_PACKAGE_NAME waste)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "WASTE maintainers <waste@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Inference engine for mixture-of-experts models larger than RAM")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_GENERATOR DEB)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# Debug info stays in the build tree (RelWithDebInfo): the package ships stripped files.
set(CPACK_STRIP_FILES TRUE)
# libwaste.so.0 gets a shlibs file and the ldconfig trigger.
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
include(CPack)
