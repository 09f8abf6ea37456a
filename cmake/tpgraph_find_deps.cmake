# Finds what the build needs from the CUDA toolkit and NCCL, in the order
# third_party/cuda/cuda_configure.bzl uses, and fails naming the variable to
# set instead of leaving a chain of missing-file errors.
#   toolkit: CUDA_PATH (-D or environment), the folder above nvcc on PATH, /usr/local/cuda
#   nccl.h:  NCCL_HOME (-D or environment), the toolkit, the system folders
# The host library needs only cuda.h and nccl.h: libcuda and libnccl are
# loaded at run time, never linked. nvcc is needed only when the kernels are
# compiled here.

set(_tpg_cuda_hints)
if(CUDA_PATH)
  list(APPEND _tpg_cuda_hints "${CUDA_PATH}")
elseif(DEFINED ENV{CUDA_PATH})
  list(APPEND _tpg_cuda_hints "$ENV{CUDA_PATH}")
endif()
find_program(_tpg_nvcc_on_path nvcc)
if(_tpg_nvcc_on_path)
  get_filename_component(_d "${_tpg_nvcc_on_path}" REALPATH)
  get_filename_component(_d "${_d}" DIRECTORY)
  get_filename_component(_d "${_d}" DIRECTORY)
  list(APPEND _tpg_cuda_hints "${_d}")
endif()
list(APPEND _tpg_cuda_hints /usr/local/cuda)

set(TPGRAPH_CUDA_ROOT "")
foreach(_c IN LISTS _tpg_cuda_hints)
  if(EXISTS "${_c}/include/cuda.h")
    set(TPGRAPH_CUDA_ROOT "${_c}")
    break()
  endif()
endforeach()
if(NOT TPGRAPH_CUDA_ROOT)
  message(FATAL_ERROR "tpgraph: CUDA toolkit not found (looked for include/cuda.h in: ${_tpg_cuda_hints}). "
                      "Set CUDA_PATH to the toolkit folder, e.g. -DCUDA_PATH=/usr/local/cuda-13.0.")
endif()
set(TPGRAPH_CUDA_INCLUDE "${TPGRAPH_CUDA_ROOT}/include")
set(TPGRAPH_NVCC "${TPGRAPH_CUDA_ROOT}/bin/nvcc")

set(_tpg_nccl_roots)
if(NCCL_HOME)
  list(APPEND _tpg_nccl_roots "${NCCL_HOME}")
elseif(DEFINED ENV{NCCL_HOME})
  list(APPEND _tpg_nccl_roots "$ENV{NCCL_HOME}")
endif()
list(APPEND _tpg_nccl_roots "${TPGRAPH_CUDA_ROOT}" /usr)
find_path(TPGRAPH_NCCL_INCLUDE nccl.h HINTS ${_tpg_nccl_roots} PATH_SUFFIXES include NO_DEFAULT_PATH)
if(NOT TPGRAPH_NCCL_INCLUDE)
  message(FATAL_ERROR "tpgraph: nccl.h not found (under: ${_tpg_nccl_roots}). "
                      "Set NCCL_HOME to the folder holding include/nccl.h.")
endif()
message(STATUS "tpgraph: CUDA at ${TPGRAPH_CUDA_ROOT}, nccl.h in ${TPGRAPH_NCCL_INCLUDE}")
