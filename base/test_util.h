// Helpers for tests.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

#include "base/random.h"

namespace megastore {

// A fresh directory under the system temp dir, removed with its contents.
class TestDir {
 public:
  TestDir() {
    static Random rng(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(this)) ^ 0x5eed);
    path_ = (std::filesystem::temp_directory_path() /
             ("megastore-test-" + std::to_string(::getpid()) + "-" + std::to_string(rng.Next())))
                .string();
    std::filesystem::create_directories(path_);
  }
  ~TestDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace megastore
