# The systemd unit and the Debian packages (cd build && cpack -G DEB):
#   gpumuxd        gpumuxd, gpumux (the CLI) and gpumuxd.service; its postinst
#                  adds the gpumux system user and group the unit runs as
#   libgpumux-dev  libgpumux.so and .a, libgpumux_alloc.so, the headers, the
#                  CMake package gpumux and gpumux.pc
# dpkg-shlibdeps (dpkg-dev) finds the libraries each package needs; the
# -dev package also needs what its users compile and link against.

configure_file(deploy/systemd/gpumuxd.service.in ${PROJECT_BINARY_DIR}/gpumuxd.service @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/gpumuxd.service DESTINATION lib/systemd/system COMPONENT daemon)

set(CPACK_PACKAGE_NAME gpumux)
set(CPACK_PACKAGE_VENDOR gpumux)
set(CPACK_PACKAGE_CONTACT "gpumux maintainers <gpumux@users.noreply.github.com>")
set(CPACK_PACKAGE_HOMEPAGE_URL https://github.com/gpumux/gpumux)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_COMPONENTS_ALL daemon dev)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# Without debug information, as Debian ships binaries (a RelWithDebInfo
# gpumuxd is 5x larger with it).
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)

set(CPACK_DEBIAN_DAEMON_PACKAGE_NAME gpumuxd)
set(CPACK_DEBIAN_DAEMON_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_DAEMON_PACKAGE_DEPENDS passwd)
set(CPACK_COMPONENT_DAEMON_DESCRIPTION
  "GPU resource daemon\n gpumuxd owns the machine's GPUs and serves device memory, streams, events\n and RNG to many processes over gRPC, with PyTorch's caching allocator,\n per-client memory stats and reclaiming of what a crashed client held.\n Also the gpumux CLI and the systemd unit.")
set(CPACK_DEBIAN_DAEMON_PACKAGE_CONTROL_EXTRA
  ${PROJECT_SOURCE_DIR}/cmake/debian/postinst ${PROJECT_SOURCE_DIR}/cmake/debian/prerm
  ${PROJECT_SOURCE_DIR}/cmake/debian/postrm)
set(CPACK_DEBIAN_DAEMON_PACKAGE_CONTROL_STRICT_PERMISSION ON)

set(CPACK_DEBIAN_DEV_PACKAGE_NAME libgpumux-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS
  "libabsl-dev, libgrpc++-dev, libprotobuf-dev, libspdlog-dev, pkg-config")
set(CPACK_COMPONENT_DEV_DESCRIPTION
  "client library of the gpumux GPU resource daemon\n libgpumux gives processes device memory, streams, events and RNG from\n gpumuxd in torch.cuda's shape; libgpumux_alloc is its C ABI for PyTorch's\n CUDAPluggableAllocator. Headers, the CMake package gpumux and gpumux.pc.")
include(CPack)
