// Runs a simulated training job against the real probe library: one probe instance per
// simulated rank hosted by this process, fed the StepModel's timelines with explicit
// timestamps. Call run() once, from the main thread; it installs SIGINT/SIGTERM handlers.
#pragma once

#include <cstdint>

#include "tools/simtrain/sim_options.h"

namespace trainscope::sim {

// Exit codes of run().
inline constexpr int kExitOk = 0;
inline constexpr int kExitUnacked = 1;  // some step reports were not acknowledged in time
inline constexpr int kExitUsage = 2;    // invalid options (message printed)

// Runs the job to the end (or until SIGINT/SIGTERM, after the current step), waits up to
// flushTimeoutMs for the agents' acks, prints a final line and returns an exit code.
int run(const SimOptions& options);

// Where the main thread blocks after an injected hang, as a rank blocks in a collective whose
// peer never arrives: sleeps until the monotonic time `untilNs` or SIGINT/SIGTERM. Never
// inlined and with external linkage, so a stack dump of a hung simulator names this frame.
[[gnu::noinline]] void simulatedCollectiveWait(int64_t untilNs);

}  // namespace trainscope::sim
