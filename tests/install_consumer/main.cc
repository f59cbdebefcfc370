// What a trainer's code sees: only the public headers and tierpool::client.
#include <tierpool/client.h>

#include <iostream>

int main() {
  tierpool::ClientOptions options;
  options.socket_path = "/tmp/tierpool-install-test-nobody-listens.sock";
  auto client = tierpool::Client::Connect(options);
  std::cout << client.status().ToString() << "\n";
  return client.ok() ? 1 : 0;
}
