#include "collector/detect/offline.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>

#include "collector/detect/robust.h"
#include "collector/detect/step_shift.h"

namespace trainscope::detect {

std::vector<ChangePoint> findChangePoints(const std::vector<double>& series,
                                          const DetectOptions& options) {
  StepShiftCore core(options.stepShift);
  std::vector<ChangePoint> out;
  for (size_t i = 0; i < series.size(); ++i) {
    StepShiftCore::Event ev = core.push(static_cast<int64_t>(i), series[i]);
    using T = StepShiftCore::EventType;
    if (ev.type == T::kShift || ev.type == T::kShiftResolved) {
      ChangePoint cp;
      cp.index = static_cast<size_t>(std::max<int64_t>(ev.onsetStep, 0));
      cp.before = ev.before;
      cp.after = ev.after;
      out.push_back(cp);
    }
  }
  // With the whole series known, describe each segment by its own median (spikes aside,
  // medians are what the online detector compares too).
  for (size_t k = 0; k < out.size(); ++k) {
    size_t from = k == 0 ? 0 : out[k - 1].index;
    size_t mid = out[k].index;
    size_t to = k + 1 < out.size() ? out[k + 1].index : series.size();
    if (mid > from) {
      out[k].before =
          median(std::vector<double>(series.begin() + static_cast<std::ptrdiff_t>(from),
                                     series.begin() + static_cast<std::ptrdiff_t>(mid)));
    }
    if (to > mid) {
      out[k].after = median(std::vector<double>(series.begin() + static_cast<std::ptrdiff_t>(mid),
                                                series.begin() + static_cast<std::ptrdiff_t>(to)));
    }
  }
  return out;
}

namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// Parses the whole of `text` as a double; false when anything is left over.
bool parseNumber(const std::string& text, double* out) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0') return false;
  *out = v;
  return true;
}

}  // namespace

Result<std::vector<double>> parseSeries(std::istream& in) {
  std::vector<double> values;
  std::string line;
  size_t lineNo = 0;
  bool sawData = false;
  while (std::getline(in, line)) {
    ++lineNo;
    std::string t = trim(line);
    if (t.empty() || t[0] == '#') continue;
    size_t comma = t.rfind(',');
    std::string field = trim(comma == std::string::npos ? t : t.substr(comma + 1));
    double v = 0.0;
    bool ok = parseNumber(field, &v);
    if (!ok) {
      // The first non-blank line may be a header ("step,value").
      if (!sawData) {
        sawData = true;
        continue;
      }
      return Result<std::vector<double>>::error("line " + std::to_string(lineNo) + ": value '" +
                                                field + "' is not a number");
    }
    if (!std::isfinite(v)) {
      return Result<std::vector<double>>::error("line " + std::to_string(lineNo) + ": value '" +
                                                field + "' is not finite (NaN or inf)");
    }
    sawData = true;
    values.push_back(v);
  }
  if (values.empty()) {
    return Result<std::vector<double>>::error("input has no values (" + std::to_string(lineNo) +
                                              " lines read)");
  }
  return values;
}

}  // namespace trainscope::detect
