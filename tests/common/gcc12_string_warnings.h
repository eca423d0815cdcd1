// Silences two false GCC 12 warnings that libstdc++'s inlined std::string code raises at -O3
// (release builds) in test code that assigns or prepends one-character literals: -Wrestrict
// (GCC PR105329, PR105651: "accessing 9223372036854775810 or more bytes") and the
// -Wmaybe-uninitialized that comes with them. Include it last, and only in a test translation
// unit that trips them; product code avoids the pattern instead (see step_shift.cpp).
#pragma once

#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wrestrict"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
