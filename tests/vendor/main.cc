// Catch2 v2 (Debian 12's catch2 package) provides main() here for all unit tests.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
