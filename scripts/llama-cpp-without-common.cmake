# Included after every project() of llama-cpp-python's build (CMAKE_PROJECT_INCLUDE, from
# scripts/setup): its CMakeLists forces llama.cpp's `common` library on, which only the
# multimodal library (not built) uses and nothing of ours loads; it was half of the wheel's
# compile. The llama.cpp project() runs after that force, so this has the last word.
set(LLAMA_BUILD_COMMON OFF CACHE BOOL "llama.cpp's common library: not built" FORCE)
