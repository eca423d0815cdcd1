/* trainscope PyTorch operator integration: a global at::RecordFunction callback that records
 * every ATen operator (and user record_function scope) as a probe op record.
 *
 * Threads: enable and disable may be called from any thread, but not concurrently with each
 * other, and not while the probe they name is being destroyed (disable first: record calls
 * on a destroyed probe are undefined). The callback itself runs on whichever thread runs the
 * operator and records on that thread's ring (see agent/probe/trainscope_probe.h).
 */
#ifndef TRAINSCOPE_TORCH_H
#define TRAINSCOPE_TORCH_H

#include <stdint.h>

#include "agent/probe/trainscope_probe.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The C ABI is snake_case (docs/STYLE.md), outside the C++ naming that clang-tidy checks. */
/* NOLINTBEGIN(readability-identifier-naming) */

/* Starts recording operators into `probe` (NULL: the process's default probe). Calling it
 * again with another probe switches probes. Returns 0, or -1 when PyTorch refused the
 * callback (the reason is logged). */
int32_t trainscope_torch_enable(ts_probe* probe);

/* Stops recording; returns at once when not enabled. Afterwards the probe may be destroyed. */
void trainscope_torch_disable(void);

/* 1 while enabled. */
int32_t trainscope_torch_enabled(void);

/* Operators recorded since load (every thread, enabled periods only). */
uint64_t trainscope_torch_ops_recorded(void);

/* NOLINTEND(readability-identifier-naming) */

#ifdef __cplusplus
}
#endif

#endif /* TRAINSCOPE_TORCH_H */
