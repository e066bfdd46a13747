// Where `fastsock run` finds libfastsock.so, and how it composes LD_PRELOAD.
#pragma once

#include <string>
#include <string_view>

namespace fastsock::tool {

struct LibraryLocation {
  std::string path;     // absolute, symlinks resolved; empty when not found
  std::string source;   // "--lib", "FASTSOCK_LIBRARY", "installed layout", "build tree"
  std::string error;    // set when path is empty: what was tried, in one sentence
};

// Resolution order: `explicit_path` (from --lib; empty when not given), $FASTSOCK_LIBRARY,
// then relative to the directory holding this executable: the installed layout
// (FASTSOCK_LIBDIR_FROM_BINDIR/libfastsock.so) and the build tree
// (../../preload/libfastsock.so). An explicit path or variable that names a missing file is
// an error rather than a reason to look elsewhere: silently loading another copy of the
// library is the surprise users complain about.
LibraryLocation locate_library(std::string_view explicit_path);

// The LD_PRELOAD value that loads `library` after whatever `existing` already preloads
// (so a sanitizer runtime listed first stays first). ld.so separates entries with ':' or
// spaces; the result keeps the existing entries in order, joined by ':'. When an entry
// already names `library` (same file after resolving symlinks) nothing is appended; an entry
// that names a *different* libfastsock.so is dropped, because two copies of the hooks in one
// process would fight over the same sockets — `replaced` then receives that entry.
std::string compose_ld_preload(std::string_view existing, const std::string& library,
                               std::string* replaced = nullptr);

}  // namespace fastsock::tool
