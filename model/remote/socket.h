// The few POSIX socket pieces the wire needs (issue 22): TCP endpoints, a listening and a
// connecting socket, non-blocking reads and writes that never raise SIGPIPE, and a pipe that wakes
// a poll() loop. Errors at the boundary are UserErrors that say which address and why.
#pragma once
#include <sys/types.h>

#include <string>

namespace memscope::model {

struct Endpoint {
  std::string host;  // a name or numeric address
  int port = 0;      // 0 when serving: the system picks a free port
  std::string text() const;  // "host:port" ("[::1]:port" for IPv6)
};

// `train --serve [ADDR:]PORT`: loopback unless an address is given.
Endpoint parse_serve_address(const std::string& text);
// `memscope --attach HOST:PORT`.
Endpoint parse_attach_address(const std::string& text);

// An owned file descriptor.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() { close(); }
  Socket(Socket&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd() const { return fd_; }
  bool open() const { return fd_ >= 0; }
  void close();

 private:
  int fd_ = -1;
};

Socket listen_on(const Endpoint& endpoint);  // non-blocking, SO_REUSEADDR
int local_port(const Socket& socket);
// The next waiting connection, non-blocking; not open() when none is waiting.
Socket accept_from(const Socket& listener);
// "ADDR:PORT" of the other end, for logs and errors.
std::string peer_name(const Socket& socket);
// Blocks for at most `timeout_s`; the socket it returns is non-blocking.
Socket connect_to(const Endpoint& endpoint, double timeout_s);
void set_nonblocking(int fd);

// Non-blocking I/O: the bytes moved, 0 when the call would block, −1 when the peer is gone (or
// the connection failed). read_some also returns −1 at end of stream.
ssize_t write_some(int fd, const char* data, size_t size);
ssize_t read_some(int fd, char* data, size_t size);

// Wakes a poll() loop from another thread: wake() never blocks, drain() empties it.
class WakePipe {
 public:
  WakePipe();
  ~WakePipe();
  WakePipe(const WakePipe&) = delete;
  WakePipe& operator=(const WakePipe&) = delete;
  int fd() const { return read_; }
  void wake();
  void drain();

 private:
  int read_ = -1, write_ = -1;
};

}  // namespace memscope::model
