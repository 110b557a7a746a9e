# Unity builds: a target's .cc sources compiled `batch` to a compile, for targets whose sources
# parse the same heavy headers (Boost.Beast and Asio, gRPC, nlohmann/json, GoogleTest): parsed
# once per batch, a cold build takes a third to a half of the CPU (issue 34's CI budget).
# Each batch is a generated source that includes its members by their path from the repository
# root, so the compiler cache (CCACHE_BASEDIR) finds it from any clone; CMake's own UNITY_BUILD
# writes absolute paths, which miss in every fresh clone. Names local to a file must be unique
# within its target (a clash is a compile error, not a silent change).

# tokenmill_unity_sources(out name batch source...): writes the batches (named after `name`,
# in this directory's binary dir) and sets `out` to them.
function(tokenmill_unity_sources out name batch)
  set(sources ${ARGN})
  list(FILTER sources INCLUDE REGEX "\\.cc$")
  list(LENGTH sources count)
  set(unity_dir ${CMAKE_CURRENT_BINARY_DIR}/unity)
  set(batches)
  set(content "")
  set(index 0)
  foreach(source IN LISTS sources)
    cmake_path(ABSOLUTE_PATH source BASE_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}
               OUTPUT_VARIABLE absolute)
    cmake_path(RELATIVE_PATH absolute BASE_DIRECTORY ${PROJECT_SOURCE_DIR})
    string(APPEND content "#include \"${absolute}\"\n")
    math(EXPR index "${index} + 1")
    math(EXPR in_batch "${index} % ${batch}")
    if(in_batch EQUAL 0 OR index EQUAL count)
      list(LENGTH batches n)
      set(file ${unity_dir}/${name}_${n}.cc)
      file(CONFIGURE OUTPUT ${file} CONTENT "${content}")  # rewritten only when it changes
      list(APPEND batches ${file})
      set(content "")
    endif()
  endforeach()
  set(${out} ${batches} PARENT_SCOPE)
endfunction()

# Compiles `target`'s .cc sources as batches instead (called in the target's own directory:
# its sources become headers there).
function(tokenmill_unity_build target batch)
  get_target_property(sources ${target} SOURCES)
  list(FILTER sources INCLUDE REGEX "\\.cc$")
  tokenmill_unity_sources(batches ${target} ${batch} ${sources})
  set_source_files_properties(${sources} PROPERTIES HEADER_FILE_ONLY ON)
  target_sources(${target} PRIVATE ${batches})
  tokenmill_unity_warnings(${target})
endfunction()

# GCC takes an included source for a header and flags its coroutine frames that hold
# anonymous-namespace types; a batch is one object, so the warning cannot bite here.
function(tokenmill_unity_warnings target)
  target_compile_options(${target} PRIVATE $<$<CXX_COMPILER_ID:GNU>:-Wno-subobject-linkage>)
endfunction()
