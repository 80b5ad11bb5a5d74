# Included by `make setup`'s llama-cpp-python build right after llama.cpp's own
# project() call (CMAKE_PROJECT_llama.cpp_INCLUDE, Makefile).  The binding turns on
# llama.cpp's `common` helper library, which none of its Python code loads and its
# wheel never ships; it is half of the compile (~100 s of 2 cores).  Its tools,
# tests and examples are off already, so nothing else needs it.
set(LLAMA_BUILD_COMMON OFF CACHE BOOL "llama.cpp's common library (not used by the binding)" FORCE)
