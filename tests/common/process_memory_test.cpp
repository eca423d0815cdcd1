// readProcessMemory tells the heap in use from the heap malloc keeps free, and releaseFreeHeap
// gives the free pages back, so the resident set drops.
#include <cstdlib>
#include <vector>

#include <catch2/catch.hpp>

#include "common/process_memory.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TS_SANITIZED_MALLOC 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TS_SANITIZED_MALLOC 1
#endif
#endif

using namespace trainscope;

TEST_CASE("process memory: resident set, heap in use and free, and metrics text") {
  const ProcessMemory m = readProcessMemory();
  CHECK(m.residentBytes > 0);
  const std::string text = processMemoryMetricsText(m);
  CHECK_THAT(text, Catch::Contains("trainscope_process_resident_bytes "));
  CHECK_THAT(text, Catch::Contains("trainscope_process_heap_bytes{state=\"in_use\"} "));
  CHECK_THAT(text, Catch::Contains("trainscope_process_heap_bytes{state=\"free\"} "));
  CHECK_THAT(text, Catch::Contains("# TYPE trainscope_process_heap_bytes gauge"));
}

TEST_CASE("process memory: freed heap malloc keeps is counted free and given back on release") {
#ifdef TS_SANITIZED_MALLOC
  SUCCEED("a sanitizer's allocator replaces malloc's arenas: nothing of malloc's to count");
#else
  constexpr size_t kBlocks = 32 * 1024;
  constexpr size_t kBlock = 1024;  // 32 MiB in small blocks: in the arena, not mmapped
  const ProcessMemory before = readProcessMemory();
  std::vector<char*> blocks;
  blocks.reserve(kBlocks);
  for (size_t i = 0; i < kBlocks; ++i) {
    auto* b = static_cast<char*>(std::malloc(kBlock));
    if (b == nullptr) FAIL("malloc failed");
    for (size_t j = 0; j < kBlock; j += 256) b[j] = 1;  // resident
    blocks.push_back(b);
  }
  const ProcessMemory full = readProcessMemory();
  CHECK(full.heapInUseBytes - before.heapInUseBytes >= 30 * 1024 * 1024);
  // Free all but the last block: it pins the top of the heap, so free() cannot shrink it and
  // the 32 MiB stay with malloc, resident.
  for (size_t i = 0; i + 1 < kBlocks; ++i) std::free(blocks[i]);
  const ProcessMemory freed = readProcessMemory();
  CHECK(freed.heapInUseBytes < full.heapInUseBytes - 30 * 1024 * 1024);
  CHECK(freed.heapFreeBytes >= 30 * 1024 * 1024);
  CHECK(freed.residentBytes > full.residentBytes - 8 * 1024 * 1024);
  releaseFreeHeap();
  const ProcessMemory released = readProcessMemory();
  CHECK(released.residentBytes < freed.residentBytes - 24 * 1024 * 1024);
  std::free(blocks.back());
#endif
}
