// Stack captures (docs/CAPTURE.md, kind "stacks"): the native stack of every thread of this
// process, unwound with libunwind inside a real-time signal handler on each thread, plus the
// language (Python) frames from the registered stack provider. Only built with libunwind.
// Call from an ordinary thread (the probe uses a short-lived worker, never the runtime or a
// training thread); dumps are serialised process-wide.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "agent/probe/capture.h"
#include "schema/trainscope.pb.h"

namespace trainscope::probe {

struct NativeFrame {
  uint64_t address = 0;  // instruction pointer (the return address for outer frames)
  std::string function;  // demangled; "" when no symbol covers the address
  uint64_t offset = 0;   // address - start of `function`
  std::string module;    // path of the ELF object the address is in
};

struct ThreadStack {
  int tid = 0;
  std::string name;                 // /proc/self/task/<tid>/comm
  std::string state;                // the state letter of /proc/self/task/<tid>/stat
  std::vector<NativeFrame> native;  // innermost first
  std::string error;  // why `native` is empty (the thread did not answer in time, exited)
};

struct StackOptions {
  std::chrono::milliseconds answerTimeout{200};     // a thread that has not unwound itself by
                                                    // then (signals blocked, stuck) gets an
                                                    // error entry instead of frames
  std::chrono::milliseconds providerTimeout{2000};  // language stacks deadline (GIL held)
};

// The signal the probe unwinds threads with (a real-time one, SIGRTMAX - 3). Its previous
// handler is restored after each dump, unless a thread never answered: then the probe's
// handler stays installed and ignores the late signal, which would otherwise take the default
// action (terminate the process) when that thread unblocks it.
int stackSignal();

// Every thread of the process except the caller, unwound now.
std::vector<ThreadStack> unwindAllThreads(const StackOptions& options = {});

// The whole stack capture: unwinds, asks the provider, writes
// <dir>/<capture_id>/rank-<R>.json.gz and answers `uploading` (or `failed` with the reason).
wire::CommandStatus runStackCapture(const wire::Command& cmd, const CaptureIdentity& identity,
                                    const std::string& dir, const StackOptions& options = {});

}  // namespace trainscope::probe
