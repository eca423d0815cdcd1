// The one Catch2 main every unit-test executable links.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
