#include "common/process_memory.h"

#include <cstdio>

#include <malloc.h>
#include <unistd.h>

#include "common/prometheus_text.h"

namespace trainscope {

ProcessMemory readProcessMemory() {
  ProcessMemory out;
  out.residentBytes = -1;
  if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
    long long size = 0;
    long long resident = 0;
    if (std::fscanf(f, "%lld %lld", &size, &resident) == 2) {
      out.residentBytes = resident * static_cast<long long>(sysconf(_SC_PAGESIZE));
    }
    std::fclose(f);
  }
  const struct mallinfo2 mi = mallinfo2();
  out.heapInUseBytes = static_cast<int64_t>(mi.uordblks + mi.hblkhd);
  out.heapFreeBytes = static_cast<int64_t>(mi.fordblks);
  return out;
}

void releaseFreeHeap() {
  (void)malloc_trim(0);
}

std::string processMemoryMetricsText(const ProcessMemory& memory) {
  MetricsText m;
  if (memory.residentBytes >= 0) {
    m.single("trainscope_process_resident_bytes", "gauge",
             "Resident memory of this process (VmRSS).", static_cast<double>(memory.residentBytes));
  }
  m.family("trainscope_process_heap_bytes", "gauge",
           "Heap malloc holds: in_use by the program, free (kept by malloc, given back to the "
           "kernel every minute).");
  m.sample({{"state", "in_use"}}, static_cast<double>(memory.heapInUseBytes));
  m.sample({{"state", "free"}}, static_cast<double>(memory.heapFreeBytes));
  return m.text();
}

}  // namespace trainscope
