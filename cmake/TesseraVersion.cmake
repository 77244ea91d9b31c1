# tessera::version — the version, the git commit and the CUDA/NCCL versions compiled in.
# The commit is read at build time (not configure time) so it never goes stale.
set(_gen ${CMAKE_BINARY_DIR}/generated)
add_custom_target(tessera_git_commit
  COMMAND ${CMAKE_COMMAND} -DSOURCE_DIR=${CMAKE_SOURCE_DIR} -DOUTPUT=${_gen}/tessera_git_commit.h
          -P ${CMAKE_SOURCE_DIR}/cmake/WriteGitCommit.cmake
  BYPRODUCTS ${_gen}/tessera_git_commit.h
  COMMENT "Reading the git commit"
  VERBATIM)
configure_file(${CMAKE_SOURCE_DIR}/cmake/version.cpp.in ${_gen}/tessera_version.cpp @ONLY)
add_library(tessera_version STATIC ${_gen}/tessera_version.cpp)
add_library(tessera::version ALIAS tessera_version)
add_dependencies(tessera_version tessera_git_commit)
target_include_directories(tessera_version PUBLIC ${CMAKE_SOURCE_DIR} PRIVATE ${_gen})
if(TESSERA_HAVE_CUDA)
  # Headers only: reading CUDART_VERSION and NCCL_VERSION_CODE needs no GPU library at run time.
  target_include_directories(tessera_version SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS} ${NCCL_INCLUDE_DIR})
  target_compile_definitions(tessera_version PRIVATE TESSERA_HAVE_CUDA=1)
endif()
