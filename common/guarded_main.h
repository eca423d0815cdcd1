// guardedMain: runs a program's main body so that an exception escaping it (out of memory, a
// bug) ends the process with its message and exit code 1, not with std::terminate's abort and
// no word of what happened. Every executable's main() goes through it.
#pragma once

#include <cstdio>
#include <exception>

namespace trainscope {

template <typename Body>
int guardedMain(const char* program, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: fatal: %s\n", program, e.what());
  } catch (...) {
    std::fprintf(stderr, "%s: fatal: an unknown exception\n", program);
  }
  return 1;
}

}  // namespace trainscope
