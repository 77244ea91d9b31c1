# Decides whether the CUDA and NCCL code is compiled (TESSERA_CUDA=AUTO|ON|OFF).
# AUTO compiles it whenever a toolkit is found, so builds without a GPU still compile the
# GPU path; whether a GPU exists is a run-time question (tests skip without one).
#
# Result: TESSERA_HAVE_CUDA, TESSERA_HAVE_NCCL (ON/OFF), CUDA::cudart, CUDA::cublas,
# CUDA::cublasLt and tessera::nccl targets when ON.
include(CheckLanguage)

set(TESSERA_HAVE_CUDA OFF)
set(TESSERA_HAVE_NCCL OFF)
if(NOT TESSERA_CUDA STREQUAL "OFF")
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 17)  # CMake 3.25 knows no C++20 flag for nvcc
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    # CMake 3.25's FindCUDAToolkit marks CUDA::nvToolsExt deprecated without checking that it
    # exists; CUDA 13 no longer ships that library. An empty target keeps it from failing.
    if(NOT TARGET CUDA::nvToolsExt)
      add_library(CUDA::nvToolsExt INTERFACE IMPORTED)
    endif()
    find_package(CUDAToolkit REQUIRED)
    find_package(NCCL)
    if(NCCL_FOUND)
      set(TESSERA_HAVE_CUDA ON)
      set(TESSERA_HAVE_NCCL ON)
    endif()
  endif()
  if(TESSERA_CUDA STREQUAL "ON" AND NOT TESSERA_HAVE_NCCL)
    message(FATAL_ERROR "TESSERA_CUDA=ON but no CUDA toolkit with NCCL was found: run scripts/setup.sh "
                        "or set CUDAToolkit_ROOT and NCCL_ROOT")
  endif()
endif()
message(STATUS "Tessera: CUDA ${TESSERA_HAVE_CUDA} (${CUDAToolkit_VERSION}), NCCL ${TESSERA_HAVE_NCCL} (${NCCL_VERSION})")
