// A fresh scratch folder per test binary run, removed at exit: tt::scratch("npy").file("a.npy").
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace tt {

class temp_dir {
 public:
  explicit temp_dir(const std::string& tag) {
    path_ = std::filesystem::temp_directory_path() /
            ("tessera_test_" + tag + "_" + std::to_string(::getpid()));
    std::filesystem::create_directories(path_);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path file(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

/// The binary's scratch folder (one per process; the tag names it).
inline const temp_dir& scratch(const std::string& tag) {
  static const temp_dir d(tag);
  return d;
}

}  // namespace tt
