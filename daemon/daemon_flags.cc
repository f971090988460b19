#include "daemon/daemon_flags.h"

#include <spdlog/spdlog.h>

#include "config/cli_knobs.h"

namespace gradsync::daemon {

namespace {

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

}  // namespace

net::HostPort parse_address(const std::string& flag, const std::string& text) {
  net::HostPort address;
  if (Status status = net::parse_host_port(text, address); !status.ok()) {
    throw CLI::ValidationError(flag, status.message());
  }
  return address;
}

void TrustFlags::add_to(CLI::App& command) {
  config::add_knob(command, knobs::kSecretFile, secret_file);
  command
      .add_flag("--insecure", insecure,
                "Listen on a non-loopback address without a group secret (anyone who reaches "
                "the port may join)")
      ->envname("GRADSYNC_INSECURE");
}

net::GroupSecret TrustFlags::secret_for(const net::HostPort& listen) const {
  net::GroupSecret secret;
  if (!secret_file.empty()) {
    std::string warning;
    if (Status status = net::GroupSecret::load(secret_file, secret, warning); !status.ok()) {
      throw CLI::ValidationError(std::string(knobs::kSecretFile.flag), status.message());
    }
    if (!warning.empty()) spdlog::warn("{}", warning);
  } else if (!is_loopback(listen.host)) {
    if (!insecure) {
      throw CLI::ValidationError(
          "--listen", listen.host +
                          " is not a loopback address and there is no group secret: make one "
                          "(head -c 32 /dev/urandom | base64 > FILE; chmod 600 FILE) and give "
                          "every coordinator and worker of the group --secret-file FILE, or pass "
                          "--insecure to let anyone who reaches the port in");
    }
    spdlog::warn(
        "--insecure: listening on {} without a group secret; anyone who reaches the "
        "port may join the group and read its tensors",
        listen.host);
  }
  return secret;
}

}  // namespace gradsync::daemon
