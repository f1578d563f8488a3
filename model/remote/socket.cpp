#include "model/remote/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>

#include "model/util/errors.h"

namespace memscope::model {

namespace {

int parse_port(const std::string& text, const std::string& whole, bool zero_ok) {
  if (text.empty() || text.size() > 5 || text.find_first_not_of("0123456789") != std::string::npos)
    throw UserError("\"" + whole + "\" has no port number (expected [ADDR:]PORT, e.g. 7070 or 0.0.0.0:7070)");
  const int port = std::stoi(text);
  if (port > 65535 || (port == 0 && !zero_ok)) throw UserError("\"" + whole + "\": port " + text + " is out of range");
  return port;
}

Endpoint split(const std::string& text, const std::string& default_host, bool zero_ok) {
  Endpoint e;
  const auto colon = text.rfind(':');
  if (colon == std::string::npos) {
    if (default_host.empty()) throw UserError("\"" + text + "\" is not HOST:PORT");
    e.host = default_host;
    e.port = parse_port(text, text, zero_ok);
    return e;
  }
  e.host = text.substr(0, colon);
  if (e.host.size() >= 2 && e.host.front() == '[' && e.host.back() == ']') e.host = e.host.substr(1, e.host.size() - 2);
  if (e.host.empty()) throw UserError("\"" + text + "\" has no address before the port");
  e.port = parse_port(text.substr(colon + 1), text, zero_ok);
  return e;
}

struct AddrInfo {
  addrinfo* list = nullptr;
  ~AddrInfo() {
    if (list) freeaddrinfo(list);
  }
};

AddrInfo resolve(const Endpoint& e, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  AddrInfo out;
  const int rc = getaddrinfo(e.host.c_str(), std::to_string(e.port).c_str(), &hints, &out.list);
  if (rc != 0) throw UserError("cannot resolve " + e.text() + ": " + gai_strerror(rc));
  return out;
}

// Tries each address `e` resolves to: a socket, then `use` on it, which says "" when that worked
// and why not otherwise. None worked: "cannot VERB ADDR: why" (the last address's reason).
Socket first_that_works(const Endpoint& e, bool passive, const char* verb,
                        const std::function<std::string(const Socket&, const addrinfo&)>& use) {
  const AddrInfo info = resolve(e, passive);
  std::string why = "no address";
  for (addrinfo* a = info.list; a; a = a->ai_next) {
    Socket s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    why = s.open() ? use(s, *a) : std::string(std::strerror(errno));
    if (why.empty()) return s;
  }
  throw UserError(std::string("cannot ") + verb + " " + e.text() + ": " + why);
}

std::string address_text(const sockaddr_storage& a) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (a.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&a);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    port = ntohs(in->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* in = reinterpret_cast<const sockaddr_in6*>(&a);
    inet_ntop(AF_INET6, &in->sin6_addr, host, sizeof host);
    port = ntohs(in->sin6_port);
  }
  return Endpoint{host, port}.text();
}

}  // namespace

std::string Endpoint::text() const {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

Endpoint parse_serve_address(const std::string& text) { return split(text, "127.0.0.1", true); }
Endpoint parse_attach_address(const std::string& text) { return split(text, "", false); }

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void set_nonblocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL, 0) | O_NONBLOCK); }

Socket listen_on(const Endpoint& e) {
  return first_that_works(e, true, "serve on", [](const Socket& s, const addrinfo& a) -> std::string {
    const int one = 1;
    setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(s.fd(), a.ai_addr, a.ai_addrlen) != 0 || ::listen(s.fd(), 8) != 0) return std::strerror(errno);
    set_nonblocking(s.fd());
    return "";
  });
}

Socket accept_from(const Socket& listener) {
  const int fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) return Socket();
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return Socket(fd);
}

int local_port(const Socket& s) {
  sockaddr_storage a{};
  socklen_t n = sizeof a;
  if (getsockname(s.fd(), reinterpret_cast<sockaddr*>(&a), &n) != 0) return 0;
  if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&a)->sin_port);
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&a)->sin6_port);
  return 0;
}

std::string peer_name(const Socket& s) {
  sockaddr_storage a{};
  socklen_t n = sizeof a;
  if (getpeername(s.fd(), reinterpret_cast<sockaddr*>(&a), &n) != 0) return "?";
  return address_text(a);
}

Socket connect_to(const Endpoint& e, double timeout_s) {
  return first_that_works(e, false, "connect to", [timeout_s](const Socket& s, const addrinfo& a) -> std::string {
    set_nonblocking(s.fd());
    if (::connect(s.fd(), a.ai_addr, a.ai_addrlen) != 0) {
      if (errno != EINPROGRESS) return std::strerror(errno);
      pollfd p{s.fd(), POLLOUT, 0};
      if (poll(&p, 1, static_cast<int>(timeout_s * 1000)) != 1) return "timed out";
      int error = 0;
      socklen_t n = sizeof error;
      getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &error, &n);
      if (error != 0) return std::strerror(error);
    }
    const int one = 1;  // commands and status are small: send them now, not with the next frame
    setsockopt(s.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return "";
  });
}

ssize_t write_some(int fd, const char* data, size_t size) {
  const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
  if (n >= 0) return n;
  return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
}

ssize_t read_some(int fd, char* data, size_t size) {
  const ssize_t n = ::recv(fd, data, size, 0);
  if (n > 0) return n;
  if (n == 0) return -1;
  return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
}

WakePipe::WakePipe() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) throw UserError(std::string("cannot make a wake pipe: ") + std::strerror(errno));
  read_ = fds[0];
  write_ = fds[1];
}

WakePipe::~WakePipe() {
  ::close(read_);
  ::close(write_);
}

void WakePipe::wake() {
  const char byte = 1;
  [[maybe_unused]] const ssize_t n = ::write(write_, &byte, 1);  // full: a wake is pending anyway
}

void WakePipe::drain() {
  char buffer[256];
  while (::read(read_, buffer, sizeof buffer) > 0) {
  }
}

}  // namespace memscope::model
