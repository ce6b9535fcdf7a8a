# Fails when a binary holds an out-of-line function outside the CPU kernels' pass namespaces
# (tessera::<abi>::detail, fn or red) that takes a pass's AVX2 or AVX-512 vector type. Such a
# function is compiled for the baseline instruction set; a pass calling it would pass the vector
# in another calling convention than the callee expects (backend/cpu/isa_pass.hpp,
# TESSERA_ISA_FLATTEN; docs/design.md).
#
# cmake -DBINARIES="<file>|<file>..." -P check_pack_calls.cmake
if(NOT BINARIES)
  message(FATAL_ERROR "check_pack_calls.cmake: BINARIES is not set")
endif()
string(REPLACE "|" ";" BINARIES "${BINARIES}")
find_program(NM nm REQUIRED)
find_program(GREP grep REQUIRED)
set(found "")
foreach(bin IN LISTS BINARIES)
  execute_process(
    COMMAND "${NM}" -C "${bin}"
    COMMAND "${GREP}" -E
            " [TtWw] (.* )?tessera::[a-z0-9_]+::(detail|fn|red)::[^(]*\\(.*isa_(avx2|avx512)::detail::simd"
    OUTPUT_VARIABLE out
    RESULT_VARIABLE rc)
  if(out)
    string(APPEND found "${bin}:\n${out}")
  endif()
endforeach()
if(found)
  message(FATAL_ERROR "baseline functions taking pass vectors (mark their callers "
                      "TESSERA_ISA_FLATTEN):\n${found}")
endif()
list(LENGTH BINARIES n)
message("check_pack_calls: ${n} binaries, no baseline function takes a pass vector")
