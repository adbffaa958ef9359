# Cross toolchain for the arm64 agent bundle (scripts/build-arm64): Debian's
# g++-aarch64-linux-gnu against a sysroot unpacked from Debian's arm64
# packages. HILNAS_ARM64_SYSROOT names the sysroot (the script passes it).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
if(NOT HILNAS_ARM64_SYSROOT)
  set(HILNAS_ARM64_SYSROOT "$ENV{HILNAS_ARM64_SYSROOT}")
endif()
if(NOT IS_DIRECTORY "${HILNAS_ARM64_SYSROOT}/usr/lib/aarch64-linux-gnu")
  message(FATAL_ERROR "HILNAS_ARM64_SYSROOT=${HILNAS_ARM64_SYSROOT} is not an arm64 sysroot "
                      "(run scripts/build-arm64 --sysroot-only)")
endif()
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES HILNAS_ARM64_SYSROOT)
set(CMAKE_SYSROOT "${HILNAS_ARM64_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH "${HILNAS_ARM64_SYSROOT}")
# Programs (protoc, grpc_cpp_plugin) are the host's; everything else the target's.
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# pkg-config (gRPC's config finds RE2 through it) reads the target's .pc files.
set(ENV{PKG_CONFIG_LIBDIR}
    "${HILNAS_ARM64_SYSROOT}/usr/lib/aarch64-linux-gnu/pkgconfig:${HILNAS_ARM64_SYSROOT}/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_SYSROOT_DIR} "${HILNAS_ARM64_SYSROOT}")
# libtorch's dependency closure reaches libraries (Qt through OpenCV) whose
# own undefined symbols only their loaders resolve; the linker checks the
# agent's symbols, not theirs.
set(CMAKE_EXE_LINKER_FLAGS_INIT "-Wl,--allow-shlib-undefined")
