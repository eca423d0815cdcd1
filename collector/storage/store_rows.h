// Pure conversions both storage engines share (SQLite and ClickHouse): the step summary, a step
// row's detail decoded from its stored StepReport, the JSON columns of anomalies and captures
// and the checks a row must pass before either engine stores it. Keeping them in one place is
// what makes the engines give the same answers. No state; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "collector/storage/store.h"
#include "common/status.h"

namespace trainscope::storage {

// Summarizes one step from its (duration, rank) pairs; sorts `durations` (not empty). Even
// counts take the mean of the two middle values; the slowest rank is the lowest-numbered one
// on a tie, so the answer is stable.
StepSummaryRow summarizeStep(int64_t step, std::vector<std::pair<int64_t, uint32_t>>& durations);

// The serialized wire::StepReport of batch.steps[i] as an engine stores it: the bytes ingest
// already holds (stepDetailViews, else stepDetails, when their size matches steps), else the
// report encoded into *scratch. Valid while the batch and *scratch are.
std::string_view stepDetail(const WriteBatch& batch, size_t i, std::string* scratch);

// Fills `row`'s detail fields (ops, collectives, p2p, the parallel split, FLOPs) from `blob`, a
// serialized wire::StepReport; an error naming the row when it does not decode.
Status fillStepDetail(std::string_view blob, StepRow* row);

// The four JSON columns of an anomaly row, as text. Non-finite evidence becomes null (JSON has
// no NaN) and is left out again when read back.
struct AnomalyJson {
  std::string ranks, nodes, evidence, labels;
};
AnomalyJson anomalyJson(const AnomalyRow& row);
// Fills row's ranks, nodes, evidence and labels from the stored JSON text (row->id names it).
Status parseAnomalyJson(const AnomalyJson& text, AnomalyRow* row);
// An anomaly a store may write: id, job and kind set (its state is typed).
Status checkAnomaly(const AnomalyRow& row);
// Sets row->state from its stored name (toString); an error naming the anomaly and the text
// for any other (a row edited by hand, or written by a newer collector).
Status parseAnomalyStateText(std::string_view text, AnomalyRow* row);

// A capture a store may write: id and job set, a known kind (its state is typed).
Status checkCapture(const CaptureRow& row);
// Sets row->state from its stored name (wire::toString); an error naming the capture and the
// text for any other (a row edited by hand, or written by a newer collector).
Status parseCaptureStateText(std::string_view text, CaptureRow* row);
// The capture's rank list and per-rank status as stored (JSON text), and back.
std::string captureRanksText(const CaptureRow& row);
std::string rankStatusText(const std::vector<CaptureRankRow>& ranks);
// A stored rank state's text as the enum, or the error naming the capture and the rank.
Result<wire::RankState> storedRankState(const std::string& captureId, uint32_t rank,
                                        const std::string& text);
Status parseCaptureRanks(std::string_view text, CaptureRow* row);
// An unknown rank state is an error naming the capture, the rank and the text.
Status parseRankStatus(std::string_view text, CaptureRow* row);

}  // namespace trainscope::storage
