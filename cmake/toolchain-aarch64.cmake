# Cross-compiling the CPU library and CLI for aarch64 (DGX Spark / GB10 hosts)
# with Debian's gcc-aarch64-linux-gnu; used by .ci/run:
#   cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64.cmake \
#         -DDSK_CUDA=OFF -DDSK_BUILD_TESTS=OFF
# Run the results with qemu-user: qemu-aarch64 -L /usr/aarch64-linux-gnu build-aarch64/dsk info
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# Lets try_run-style checks and ctest run target binaries under qemu when present.
find_program(DSK_QEMU_AARCH64 qemu-aarch64)
if(DSK_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${DSK_QEMU_AARCH64} -L /usr/aarch64-linux-gnu)
endif()
