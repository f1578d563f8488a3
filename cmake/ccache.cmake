# Use ccache when present. The sloppiness lets ccache cache translation units that use the
# precompiled torch header (ccache manual, "Precompiled headers"); the base dir makes paths
# relative so that clones in other directories share the cache.
find_program(MEMSCOPE_CCACHE ccache)
if(MEMSCOPE_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  set(CMAKE_CXX_COMPILER_LAUNCHER
      ${CMAKE_COMMAND} -E env
      "CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime"
      "CCACHE_BASEDIR=${PROJECT_SOURCE_DIR}"   # a fresh clone elsewhere still hits the cache
      ${MEMSCOPE_CCACHE})
  message(STATUS "memscope: using ccache ${MEMSCOPE_CCACHE}")
endif()
