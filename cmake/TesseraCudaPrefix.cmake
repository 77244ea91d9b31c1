# Where no system CUDA toolkit exists, scripts/setup.sh arranges NVIDIA's wheels as a
# toolkit in .deps/cuda. Point the CUDA language and CUDAToolkit at it unless the user
# chose a compiler or toolkit already. Runs before project().
set(_tessera_local_cuda ${CMAKE_CURRENT_SOURCE_DIR}/.deps/cuda)
if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS ${_tessera_local_cuda}/bin/nvcc)
  find_program(_tessera_system_nvcc nvcc PATHS /usr/local/cuda/bin NO_CACHE)
  if(NOT _tessera_system_nvcc)
    set(CMAKE_CUDA_COMPILER ${_tessera_local_cuda}/bin/nvcc CACHE FILEPATH "CUDA compiler")
    set(CUDAToolkit_ROOT ${_tessera_local_cuda} CACHE PATH "CUDA toolkit root")
    set(NCCL_ROOT ${_tessera_local_cuda} CACHE PATH "NCCL root")
  endif()
endif()
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  # H100/H200 (sm_90); override with -DCMAKE_CUDA_ARCHITECTURES=...
  set(CMAKE_CUDA_ARCHITECTURES 90 CACHE STRING "CUDA architectures")
endif()
