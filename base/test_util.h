// Helpers for tests.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdint>
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

// A raw TCP connection to 127.0.0.1:`port` whose reads give up after 10 s
// (for tests that speak bytes at a server); -1 if it cannot connect.
inline int ConnectLoopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

}  // namespace megastore
