// Output formats: live table (output_table.cc, output_compare_table.cc), CSV
// (output_csv.cc), JSON (output_json.cc), NetPIPE np.out (output_npout.cc). Run metadata
// comes from metadata.cc, the hygiene warnings in it from hygiene.cc.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "driver.hpp"
#include "options.hpp"

namespace fastsock_pipe {

struct Metadata {
  std::string host, kernel, cpu_model, started_at, ld_preload;
  long cpus_online = 0;
  long clock_resolution_ns = 0;        // clock_getres(CLOCK_MONOTONIC)
  std::size_t cache_bytes = 0;         // -I: the cache size the buffer pools exceed
  std::vector<std::string> warnings;   // hygiene warnings, also printed at start
};
Metadata collect_metadata(const Options& opt);

// "arrays: transmitter library on shm, receiver library on shm": what each end used.
std::string arrays_line(const Lane& lane);

// Single transport: one row per size.
void table_header(std::FILE* out, const Options& opt);
void table_row(std::FILE* out, const SizeStats& s, std::size_t index);
void table_summary(std::FILE* out, const Lane& lane, const RunInfo& info);

// Several transports (--compare): one row per size, a column group per transport.
void compare_header(std::FILE* out, const Options& opt, const std::vector<Lane>& lanes);
void compare_row(std::FILE* out, const std::vector<Lane>& lanes, std::size_t row);
void compare_summary(std::FILE* out, const std::vector<Lane>& lanes, const RunInfo& info);

// Each returns false after printing why the file could not be written.
bool write_csv(const std::string& path, const Options& opt, const std::vector<Lane>& lanes);
bool write_json(const std::string& path, const Metadata& m, const Options& opt,
                const std::vector<Lane>& lanes, const RunInfo& info);
bool write_npout(const std::string& path, const Options& opt, const RunResult& r);

}  // namespace fastsock_pipe
