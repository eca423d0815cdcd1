// The change-point benchmark's scores (TCPDBench, van den Burg & Williams 2020, "An Evaluation
// of Change Point Detection Algorithms"): the F1 of predicted change points against one or more
// annotators' sets, with a margin. Pure functions; any thread.
#pragma once

#include <cstddef>
#include <vector>

namespace trainscope::bench {

// A change point is the 0-based index of the first value after the change.
using ChangePoints = std::vector<size_t>;

struct F1Score {
  double f1 = 0.0;
  double precision = 0.0;
  double recall = 0.0;
};

// The annotations that a prediction hits: each annotation (ascending) takes the closest
// prediction within `margin` not yet taken (the smaller one on a tie); the annotations taken.
ChangePoints truePositives(const ChangePoints& annotations, const ChangePoints& predictions,
                           size_t margin);

// TCPDBench's f_measure: index 0 (the start of the series) is added to every annotator's set
// and to the prediction; precision is over the union of the annotators' sets, recall is the
// mean over annotators; F1 = 2PR / (P + R). `annotators` must hold at least one set (an
// empty set means "no change").
F1Score f1Score(const std::vector<ChangePoints>& annotators, const ChangePoints& predictions,
                size_t margin = 5);

}  // namespace trainscope::bench
