// A free TCP port on 127.0.0.1 for a test's own server: bound to port 0, read back,
// closed. Nothing listens on it afterwards, so it also serves as a port where a
// connection is refused. 0 if no socket could be bound.

#ifndef BULWARK_TESTS_LOOPBACK_PORT_H_
#define BULWARK_TESTS_LOOPBACK_PORT_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace bulwark::testing {

inline int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

}  // namespace bulwark::testing

#endif  // BULWARK_TESTS_LOOPBACK_PORT_H_
