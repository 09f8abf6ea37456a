# Embeds the device code the way tools/cuda/defs.bzl's cuda_fatbin does: one
# fatbin per kernels/<stem>.cu (nvcc -fatbin for the given archs), pulled into
# an object by an assembler .incbin, and a C table naming each blob
# (lib/embedded.h). The library loads them with cuLibraryLoadData, so it
# carries its kernels and never links the CUDA runtime.
#
# tpgraph_embed_kernels(<out_var> SOURCES .cu... HEADERS .cuh... ARCHS a;b PREBUILT dir)
# sets <out_var> to the generated .S and .c files to compile into the library.
# PREBUILT: take <dir>/*_<stem>.fatbin.inc (Bazel's names) instead of nvcc,
# e.g. to reuse the fatbins CI's Bazel pass already built.
#
# The CUTLASS kernels (kernels/gemm/sm90_cutlass*.cu) and the host code that
# builds their Params (lib/gemm/cutlass_params.cu) read CUTLASS's headers:
# tpgraph_find_cutlass() finds them as third_party/cutlass/cutlass_configure.bzl
# does (TPG_CUTLASS_HOME, else ~/.cache/tpgraph/cutlass-4.2.0.0; tools/setup.sh
# installs them there), and tpgraph_cutlass_host_object() compiles that host
# code as tools/cuda/defs.bzl's cuda_host_object does.

# Sets TPGRAPH_CUTLASS_INCLUDE (cute/ and cutlass/ under it), or fails naming the fix.
function(tpgraph_find_cutlass)
  if(TPG_CUTLASS_HOME)
    set(home "${TPG_CUTLASS_HOME}")
  elseif(DEFINED ENV{TPG_CUTLASS_HOME} AND NOT "$ENV{TPG_CUTLASS_HOME}" STREQUAL "")
    set(home "$ENV{TPG_CUTLASS_HOME}")
  else()
    set(home "$ENV{HOME}/.cache/tpgraph/cutlass-4.2.0.0")
  endif()
  set(inc "${home}/cutlass_library/source/include")
  if(NOT EXISTS "${inc}/cutlass/version.h")
    message(FATAL_ERROR "tpgraph: CUTLASS 4.2.0 headers not found at ${inc}. Run tools/setup.sh (it installs "
                        "nvidia-cutlass==4.2.0.0 there with pip) or set TPG_CUTLASS_HOME to that pip --target folder.")
  endif()
  file(STRINGS "${inc}/cutlass/version.h" v REGEX "^#define CUTLASS_(MAJOR|MINOR|PATCH) ")
  string(REGEX REPLACE "[^0-9;]" "" v "${v}")
  if(NOT "${v}" STREQUAL "4;2;0")
    message(FATAL_ERROR "tpgraph: CUTLASS at ${inc} is not 4.2.0 (${v}); tpgraph is pinned to it "
                        "(third_party/cutlass/README.md)")
  endif()
  set(TPGRAPH_CUTLASS_INCLUDE "${inc}" PARENT_SCOPE)
endfunction()

# tpgraph_cutlass_host_object(<out_var> SOURCE x.cu HEADERS ... PREBUILT dir):
# the object of x.cu compiled by nvcc as host code, its CUDA runtime
# references renamed to tpg_cutlass_rt_<name> (lib/gemm/cutlass_rt_stubs.c
# defines them) and checked free of runtime and libstdc++ symbols.
# PREBUILT (Bazel's bazel-bin/kernels): take the object Bazel's rule made,
# bazel-bin/lib/gemm_cutlass_params.o beside it, when it is there.
function(tpgraph_cutlass_host_object out_var)
  cmake_parse_arguments(H "" "SOURCE;PREBUILT" "HEADERS" ${ARGN})
  get_filename_component(stem "${H_SOURCE}" NAME_WE)
  if(H_PREBUILT AND EXISTS "${H_PREBUILT}/../lib/gemm_cutlass_params.o")
    get_filename_component(o "${H_PREBUILT}/../lib/gemm_cutlass_params.o" ABSOLUTE)
    set_source_files_properties("${o}" PROPERTIES EXTERNAL_OBJECT TRUE)
    set(${out_var} "${o}" PARENT_SCOPE)
    return()
  endif()
  if(NOT EXISTS "${TPGRAPH_NVCC}")
    message(FATAL_ERROR "tpgraph: nvcc not found at ${TPGRAPH_NVCC} (set CUDA_PATH)")
  endif()
  find_program(TPGRAPH_OBJCOPY objcopy REQUIRED)
  find_program(TPGRAPH_NM nm REQUIRED)
  set(dir "${CMAKE_CURRENT_BINARY_DIR}/kernels")
  file(MAKE_DIRECTORY "${dir}")
  set(raw "${dir}/${stem}.raw.o")
  set(obj "${dir}/${stem}.o")
  add_custom_command(OUTPUT "${obj}"
    COMMAND "${TPGRAPH_NVCC}" -c -x cu -Xcompiler -fPIC,-fvisibility=hidden -DNDEBUG -std=c++17 -O3
            "-I${PROJECT_SOURCE_DIR}" "-I${TPGRAPH_CUTLASS_INCLUDE}" --expt-relaxed-constexpr
            -DCUTLASS_ENABLE_DIRECT_CUDA_DRIVER_CALL=1 -gencode=arch=compute_90a,code=compute_90a
            -o "${raw}" "${H_SOURCE}"
    COMMAND sh -c "set -e; ${TPGRAPH_NM} -u '${raw}' | awk '$2 ~ /^_*cuda/ { print $2 \" tpg_cutlass_rt_\" $2 }' > '${obj}.syms'; ${TPGRAPH_OBJCOPY} --redefine-syms='${obj}.syms' '${raw}' '${obj}'; rm -f '${obj}.syms'; if ${TPGRAPH_NM} -u '${obj}' | awk '{print $2}' | grep -E '^(_*cuda|_Z|__cxa_(throw|allocate|begin|end|rethrow|guard)|__gxx_personality)'; then echo '${stem}: refers to the CUDA runtime or libstdc++' >&2; rm -f '${obj}'; exit 1; fi"
    DEPENDS "${H_SOURCE}" ${H_HEADERS}
    COMMENT "nvcc -c (host code) ${stem}.cu"
    VERBATIM)
  set_source_files_properties("${obj}" PROPERTIES EXTERNAL_OBJECT TRUE GENERATED TRUE)
  set(${out_var} "${obj}" PARENT_SCOPE)
endfunction()

function(tpgraph_embed_kernels out_var)
  cmake_parse_arguments(E "" "PREBUILT" "SOURCES;HEADERS;ARCHS" ${ARGN})
  set(gencode)
  foreach(a IN LISTS E_ARCHS)
    if(a MATCHES "^sm_([0-9]+a?)$")
      list(APPEND gencode "-gencode=arch=compute_${CMAKE_MATCH_1},code=sm_${CMAKE_MATCH_1}")
    elseif(a MATCHES "^compute_([0-9]+a?)$")
      list(APPEND gencode "-gencode=arch=compute_${CMAKE_MATCH_1},code=compute_${CMAKE_MATCH_1}")
    else()
      message(FATAL_ERROR "TPGRAPH_CUDA_ARCHS: '${a}' is neither sm_XX (SASS) nor compute_XX (PTX)")
    endif()
  endforeach()
  list(SORT E_SOURCES)
  set(dir "${CMAKE_CURRENT_BINARY_DIR}/kernels")
  file(MAKE_DIRECTORY "${dir}")
  set(asm "")
  set(decls "")
  set(rows "")
  set(fatbins)
  foreach(src IN LISTS E_SOURCES)
    get_filename_component(stem "${src}" NAME_WE)
    if(E_PREBUILT)
      file(GLOB found "${E_PREBUILT}/*_${stem}.fatbin.inc")
      list(LENGTH found n)
      if(NOT n EQUAL 1)
        message(FATAL_ERROR "TPGRAPH_PREBUILT_KERNELS: want exactly one *_${stem}.fatbin.inc in ${E_PREBUILT}, found ${n}")
      endif()
      set(fb "${found}")
    else()
      if(NOT EXISTS "${TPGRAPH_NVCC}")
        message(FATAL_ERROR "tpgraph: nvcc not found at ${TPGRAPH_NVCC} (set CUDA_PATH, or TPGRAPH_PREBUILT_KERNELS)")
      endif()
      set(fb "${dir}/${stem}.fatbin")
      add_custom_command(OUTPUT "${fb}"
        COMMAND "${TPGRAPH_NVCC}" -fatbin -std=c++17 -O3 "-I${PROJECT_SOURCE_DIR}" "-I${TPGRAPH_CUTLASS_INCLUDE}"
                --expt-relaxed-constexpr ${gencode} -o "${fb}" "${src}"
        DEPENDS "${src}" ${E_HEADERS}
        COMMENT "nvcc -fatbin kernels/${stem}.cu (${E_ARCHS})"
        VERBATIM)
    endif()
    list(APPEND fatbins "${fb}")
    set(sym "tpg_kernels_${stem}")
    string(APPEND asm
      "  .section .rodata.${sym},\"a\"\n  .balign 64\n"
      "  .globl ${sym}_start\n  .hidden ${sym}_start\n${sym}_start:\n"
      "  .incbin \"${fb}\"\n"
      "  .globl ${sym}_end\n  .hidden ${sym}_end\n${sym}_end:\n  .byte 0\n")
    string(APPEND decls "extern const unsigned char ${sym}_start[], ${sym}_end[];\n")
    string(APPEND rows "  { \"${stem}\", ${sym}_start, ${sym}_end },\n")
  endforeach()
  string(APPEND asm "  .section .note.GNU-stack,\"\",@progbits\n")
  string(REPLACE ";" "," archs_csv "${E_ARCHS}")
  file(CONFIGURE OUTPUT "${dir}/embed.S" CONTENT "${asm}" @ONLY)
  file(CONFIGURE OUTPUT "${dir}/table.c" CONTENT
    "/* Generated by cmake/tpgraph_kernels.cmake: the embedded device code. */\n#include <stddef.h>\n#include \"lib/embedded.h\"\n${decls}const tpg_embedded_blob tpg_kernels[] = {\n${rows}  { NULL, NULL, NULL }\n};\nconst char tpg_kernels_archs[] = \"${archs_csv}\";\n" @ONLY)
  # The assembler's dependency scan does not see .incbin inputs: name them.
  set_source_files_properties("${dir}/embed.S" PROPERTIES OBJECT_DEPENDS "${fatbins}")
  set(${out_var} "${dir}/embed.S" "${dir}/table.c" PARENT_SCOPE)
endfunction()
