# check_layers.cmake - fails when a header under include/tessera includes one of a higher layer,
# when one CPU backend header includes a CUDA one or the reverse (docs/design.md, "Layers"), or
# when a header outside backend/cpu/simd/ uses raw vector intrinsics (x86 or NEON).
#
#   cmake -DROOT=<include/tessera> -P check_layers.cmake
#   cmake -DROOT=<include/tessera> -DPLANT=<scratch dir> -P check_layers.cmake
#
# The layers, bottom to top (a header may include its own layer and those below):
#   0 core      config.hpp, core/                       tensors, dtypes, the backend contract
#   1 kernel    kernel/                                 functors, reducers, *_problem structs
#   2 backend   backend/cpu/, backend/cuda/             kernels (neither includes the other)
#   3 ops       ops/                                    validated ops calling the kernels
#   4 formats   io/, text/, tessera.hpp, cuda.hpp       tensor files, tokenizers, the umbrellas
#   5 autograd  autograd/, autograd.hpp
#   6 nn        nn/, optim/, nn.hpp, optim.hpp          modules, optimizers, checkpoints
#   7 apps      data/, interop/, models/, dist/, dist.hpp  datasets, Eigen interop, pretrained
#                                                       models, distributed training (MPI)
# A header in none of them is an error too, so a new folder must be given a layer here.
# With PLANT, the tree is copied to that folder, core/shape.hpp is given an include of
# ops/map.hpp and backend/cpu/reduce.hpp an AVX2 intrinsic, and the check must report exactly
# those two (the test of this test).
cmake_minimum_required(VERSION 3.20)

function(layer_of path out)
  set(l -1)
  if(path STREQUAL "config.hpp" OR path MATCHES "^core/")
    set(l 0)
  elseif(path MATCHES "^kernel/")
    set(l 1)
  elseif(path MATCHES "^backend/(cpu|cuda)/")
    set(l 2)
  elseif(path MATCHES "^ops/")
    set(l 3)
  elseif(path MATCHES "^(io|text)/" OR path STREQUAL "tessera.hpp" OR path STREQUAL "cuda.hpp")
    set(l 4)
  elseif(path MATCHES "^autograd/" OR path STREQUAL "autograd.hpp")
    set(l 5)
  elseif(path MATCHES "^(nn|optim)/" OR path STREQUAL "nn.hpp" OR path STREQUAL "optim.hpp")
    set(l 6)
  elseif(path MATCHES "^(data|interop|models|dist)/" OR path STREQUAL "dist.hpp")
    set(l 7)
  endif()
  set(${out} ${l} PARENT_SCOPE)
endfunction()

# Raw intrinsics: x86 (_mm*_ functions, __m128/256/512 registers, __mmask, _cvtsh_ss) and NEON
# (vector types such as float32x4_t, vld1q_/vst1q_ and the like).
set(intrinsic
    "_mm[0-9]*_[a-z]|__m(128|256|512)|__mmask|_cvtsh_ss|(float|u?int)(8|16|32|64)x[0-9]+_t|[^a-z_]v(ld|st)[1-4]q?_")

# Sets ${out} to the list of violations found under root.
function(check_tree root out)
  set(bad)
  file(GLOB_RECURSE headers RELATIVE "${root}" "${root}/*.hpp" "${root}/*.cuh" "${root}/*.h")
  foreach(h IN LISTS headers)
    layer_of("${h}" hl)
    if(hl LESS 0)
      list(APPEND bad "${h} is in no layer (tests/layers/check_layers.cmake)")
      continue()
    endif()
    if(NOT h MATCHES "^backend/cpu/simd/")
      # Code lines (not // comments) naming an intrinsic, a vector register type or a mask.
      file(STRINGS "${root}/${h}" raw REGEX "${intrinsic}")
      list(FILTER raw EXCLUDE REGEX "^[ \t]*//")
      if(raw)
        list(GET raw 0 first)
        string(STRIP "${first}" first)
        list(APPEND bad "${h} uses vector intrinsics outside backend/cpu/simd/: ${first}")
      endif()
    endif()
    get_filename_component(dir "${h}" DIRECTORY)
    file(STRINGS "${root}/${h}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
    foreach(line IN LISTS lines)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]+)\".*" "\\1" inc "${line}")
      get_filename_component(abs "${root}/${dir}/${inc}" ABSOLUTE)
      file(RELATIVE_PATH t "${root}" "${abs}")
      if(t MATCHES "^\\.\\.")
        continue()  # outside the library (none today)
      endif()
      layer_of("${t}" tl)
      if(tl GREATER hl)
        list(APPEND bad "${h} (layer ${hl}) includes ${t} (layer ${tl})")
      elseif((h MATCHES "^backend/cpu/" AND t MATCHES "^backend/cuda/") OR
             (h MATCHES "^backend/cuda/" AND t MATCHES "^backend/cpu/"))
        list(APPEND bad "${h} includes ${t}: one backend may not include another")
      endif()
    endforeach()
  endforeach()
  set(${out} "${bad}" PARENT_SCOPE)
endfunction()

if(NOT ROOT)
  message(FATAL_ERROR "check_layers: pass -DROOT=<include/tessera>")
endif()
if(PLANT)
  file(REMOVE_RECURSE "${PLANT}")
  file(COPY "${ROOT}/" DESTINATION "${PLANT}")
  file(APPEND "${PLANT}/core/shape.hpp" "\n#include \"../ops/map.hpp\"\n")
  file(APPEND "${PLANT}/backend/cpu/reduce.hpp" "\n#define TESSERA_PLANTED(x) _mm256_movemask_ps(x)\n")
  check_tree("${PLANT}" bad)
  set(want "backend/cpu/reduce.hpp uses vector intrinsics outside backend/cpu/simd/: #define TESSERA_PLANTED(x) _mm256_movemask_ps(x)"
           "core/shape.hpp (layer 0) includes ops/map.hpp (layer 3)")
  if(NOT bad STREQUAL want)
    message(FATAL_ERROR "check_layers: the planted include and intrinsic were not reported alone; "
                        "got: ${bad}")
  endif()
  message(STATUS "check_layers: the planted include and intrinsic were reported: ${bad}")
  return()
endif()
check_tree("${ROOT}" bad)
if(bad)
  list(JOIN bad "\n  " text)
  message(FATAL_ERROR "check_layers: includes against the layer order:\n  ${text}")
endif()
message(STATUS "check_layers: every include runs down the layers")
