// Output formats: live table (output_table.cc), CSV (output_csv.cc), JSON (output_json.cc),
// NetPIPE 3.7 np.out (output_npout.cc). Run metadata comes from metadata.cc.
#pragma once

#include <cstdio>
#include <string>

#include "options.hpp"
#include "runner.hpp"

namespace fastsock_pipe {

struct Metadata {
  std::string host, kernel, cpu_model, started_at, ld_preload;
  long cpus_online = 0;
  long clock_resolution_ns = 0;  // clock_getres(CLOCK_MONOTONIC)
};
Metadata collect_metadata();

void table_header(std::FILE* out, const Options& opt);
void table_row(std::FILE* out, const SizeStats& s, std::size_t index, std::size_t total);
void table_summary(std::FILE* out, const RunResult& r);

// Each returns false after printing why the file could not be written.
bool write_csv(const std::string& path, const RunResult& r);
bool write_json(const std::string& path, const Metadata& m, const Options& opt, const RunResult& r);
bool write_npout(const std::string& path, const Options& opt, const RunResult& r);

}  // namespace fastsock_pipe
