// A small long-option scanner shared by the subcommands.
//
// getopt_long(3) keeps global state and prints messages under argv[0]; a subcommand wants
// its own name in messages ("fastsock run: ...") and must stop at the program to run, so
// each command walks its arguments with this cursor instead. Accepted forms: `--name`,
// `--name VALUE`, `--name=VALUE`; `--` ends the options.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace fastsock::tool {

class OptionCursor {
 public:
  // `command` names the subcommand in error messages, e.g. "fastsock run".
  OptionCursor(std::string_view command, std::span<char* const> args)
      : command_(command), args_(args) {}

  // Moves to the next argument. Returns false at the end, or after consuming `--`
  // (then rest() holds what follows it).
  bool next();

  // The current argument.
  std::string_view current() const { return args_[index_]; }
  // True when the current argument looks like an option ("-x", "--xyz", but not "-").
  bool is_option() const;

  // True when the current argument is exactly `--name` (a flag takes no value; `--name=x`
  // is reported as an error and makes failed() true).
  bool flag(std::string_view name);
  // True when the current argument is `--name` or `--name=...`; stores the value, taking it
  // from the next argument when needed. A missing value is reported and makes failed() true.
  bool value(std::string_view name, std::string& out);

  // The arguments from the current one (when the scan stopped on a non-option) or from the
  // one after `--`, to the end.
  std::span<char* const> rest() const;

  // Prints "<command>: unknown option '<arg>'" (and a hint) and makes failed() true.
  void unknown();
  bool failed() const { return failed_; }

  // Prints "<command>: <message>" to stderr, followed by the --help hint.
  void usage_error(std::string_view message);

 private:
  std::string_view command_;
  std::span<char* const> args_;
  size_t index_ = 0;
  bool started_ = false;
  bool after_separator_ = false;
  bool failed_ = false;
};

}  // namespace fastsock::tool
