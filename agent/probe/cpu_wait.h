// The calling thread's run delay: how long, in total since it started, it was ready to run but
// waited for a CPU (the kernel's scheduler statistics, /proc/thread-self/schedstat, second
// field). Read at each live step mark, so the fold can say how much of a step the training
// thread spent queued behind other work on its host: the share of a rank's time that no
// operator, collective or data loader accounts for when the host is oversubscribed.
// Costs one pread of a kept descriptor (a few microseconds) per step mark. Any thread.
#pragma once

#include <cstdint>

namespace trainscope::probe {

// The calling thread's cumulative run delay in ns, or -1 when it cannot be read (no /proc, a
// kernel without scheduler statistics) or it is switched off ($TRAINSCOPE_CPU_WAIT=0: the
// simulator's threads stand in for ranks whose scheduling they are not).
int64_t threadRunDelayNs();

// Overrides $TRAINSCOPE_CPU_WAIT for the process (the simulator switches the reads off).
void setCpuWaitEnabled(bool on);

// Parses schedstat text ("<cpu ns> <run delay ns> <timeslices>"): the run delay, or -1.
int64_t parseRunDelay(const char* text, long length);

}  // namespace trainscope::probe
