// Catch2 v2 provides main() for the shm unit tests.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
