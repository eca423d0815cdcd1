// The process-wide language stack provider (ts_probe_set_stack_provider): the Python package
// registers one so stack captures show each thread's Python frames. Any thread may set or call
// it; a call runs the provider on a short-lived thread of its own under a deadline.
#pragma once

#include <chrono>
#include <string>

#include "agent/probe/trainscope_probe.h"

namespace trainscope::probe {

void setStackProvider(ts_stack_provider provider, void* user);
bool hasStackProvider();

struct ProviderStacks {
  bool ok = false;     // the provider answered in time with JSON
  std::string json;    // what it wrote (a JSON object: native tid -> frames)
  std::string detail;  // why not, when !ok and a provider is registered; "" otherwise
};

// Calls the provider and waits up to `deadline`. A provider that does not answer in time is
// left running on its detached thread (it owns its buffer), so the caller never hangs on it.
ProviderStacks callStackProvider(std::chrono::milliseconds deadline);

}  // namespace trainscope::probe
