// This process's memory as the kernel and malloc see it, for /metrics and the soak tool: the
// resident set beside the heap malloc holds in use and holds free. A resident set that grows
// while the heap in use stays flat is memory malloc keeps after it was freed (fragmentation,
// idle arenas), not a leak; releaseFreeHeap() gives such pages back. Linux and glibc; any
// thread.
#pragma once

#include <cstdint>
#include <string>

namespace trainscope {

struct ProcessMemory {
  int64_t residentBytes = 0;   // VmRSS (/proc/self/statm), -1 when unreadable
  int64_t heapInUseBytes = 0;  // malloc's allocated bytes, its own mmaps included (mallinfo2)
  int64_t heapFreeBytes = 0;   // bytes malloc holds free in its arenas
};

ProcessMemory readProcessMemory();

// Returns the free pages of every malloc arena to the kernel (glibc malloc_trim(0)): it walks
// the arenas under their locks, a few milliseconds for a heap of some hundred MB, so call it
// now and then from a thread that can wait, not per request.
void releaseFreeHeap();

// The three figures in Prometheus text: trainscope_process_resident_bytes and
// trainscope_process_heap_bytes{state="in_use"|"free"}.
std::string processMemoryMetricsText(const ProcessMemory& memory);

}  // namespace trainscope
