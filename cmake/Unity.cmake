# tokenmill_unity_build(target batch): compiles the target's .cc sources `batch` to a compile,
# for libraries whose every source parses the same heavy headers (Boost.Beast and Asio, gRPC):
# parsed once per batch, a cold build takes about a third of the CPU (issue 34's CI budget).
# Each batch is a generated source that includes its members by their path from the repository
# root, so the compiler cache (CCACHE_BASEDIR) finds it from any clone; CMake's own UNITY_BUILD
# writes absolute paths, which miss in every fresh clone.
function(tokenmill_unity_build target batch)
  get_target_property(sources ${target} SOURCES)
  get_target_property(source_dir ${target} SOURCE_DIR)
  list(FILTER sources INCLUDE REGEX "\\.cc$")
  list(LENGTH sources count)
  set(unity_dir ${CMAKE_CURRENT_BINARY_DIR}/unity)
  set(batches)
  set(content "")
  set(index 0)
  foreach(source IN LISTS sources)
    cmake_path(ABSOLUTE_PATH source BASE_DIRECTORY ${source_dir} OUTPUT_VARIABLE absolute)
    cmake_path(RELATIVE_PATH absolute BASE_DIRECTORY ${PROJECT_SOURCE_DIR})
    string(APPEND content "#include \"${absolute}\"\n")
    set_source_files_properties(${source} PROPERTIES HEADER_FILE_ONLY ON)
    math(EXPR index "${index} + 1")
    math(EXPR in_batch "${index} % ${batch}")
    if(in_batch EQUAL 0 OR index EQUAL count)
      list(LENGTH batches n)
      set(file ${unity_dir}/${target}_${n}.cc)
      file(CONFIGURE OUTPUT ${file} CONTENT "${content}")  # rewritten only when it changes
      list(APPEND batches ${file})
      set(content "")
    endif()
  endforeach()
  target_sources(${target} PRIVATE ${batches})
  # GCC takes an included source for a header and flags its coroutine frames that hold
  # anonymous-namespace types; a batch is one object, so the warning cannot bite here.
  target_compile_options(${target} PRIVATE $<$<CXX_COMPILER_ID:GNU>:-Wno-subobject-linkage>)
endfunction()
