# Everything comes from Debian packages (scripts/setup installs them).
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)

if(NOT TOKENMILL_FUZZ)
  find_package(CLI11 REQUIRED)
  if(TOKENMILL_TESTS)
    find_package(GTest REQUIRED)
  endif()
endif()
