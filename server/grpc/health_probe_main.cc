// tokenmill-health: asks a gRPC server's standard health service
// (grpc.health.v1.Health/Check) whether it is SERVING. Exit 0 if it is, 1 otherwise, with the
// answer on stdout: the container HEALTHCHECK of tokenmill-server (docker/), where neither
// grpcurl nor Python is installed. --tls-ca (and, for mutual TLS, --tls-cert and --tls-key)
// probe a server that speaks TLS.
//
// The two health messages have one field each, so they are written and read here by hand
// rather than compiled from grpc's health.proto, which Debian does not ship.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <future>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

constexpr const char* kCheckMethod = "/grpc.health.v1.Health/Check";
// HealthCheckResponse.ServingStatus values.
constexpr const char* kServingStatusNames[] = {"UNKNOWN", "SERVING", "NOT_SERVING",
                                               "SERVICE_UNKNOWN"};
constexpr uint64_t kServing = 1;

void AppendVarint(uint64_t value, std::string& out) {
  while (value >= 0x80) {
    out += static_cast<char>((value & 0x7f) | 0x80);
    value >>= 7;
  }
  out += static_cast<char>(value);
}

std::optional<uint64_t> ReadVarint(std::string_view& in) {
  uint64_t value = 0;
  for (int shift = 0; shift < 64 && !in.empty(); shift += 7) {
    const auto byte = static_cast<uint8_t>(in.front());
    in.remove_prefix(1);
    value |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) return value;
  }
  return std::nullopt;
}

// HealthCheckRequest { string service = 1; }: the empty message asks about the whole server.
std::string EncodeRequest(const std::string& service) {
  std::string bytes;
  if (service.empty()) return bytes;
  bytes += '\x0a';  // field 1, length-delimited
  AppendVarint(service.size(), bytes);
  bytes += service;
  return bytes;
}

// HealthCheckResponse { ServingStatus status = 1; }: the status (0 when absent), or nullopt
// when the bytes are not such a message.
std::optional<uint64_t> DecodeStatus(std::string_view in) {
  uint64_t status = 0;
  while (!in.empty()) {
    const std::optional<uint64_t> tag = ReadVarint(in);
    if (!tag) return std::nullopt;
    const uint64_t wire_type = *tag & 7;
    if (wire_type == 0) {  // varint
      const std::optional<uint64_t> value = ReadVarint(in);
      if (!value) return std::nullopt;
      if ((*tag >> 3) == 1) status = *value;
    } else if (wire_type == 2) {  // length-delimited field from a newer proto: skip it
      const std::optional<uint64_t> length = ReadVarint(in);
      if (!length || *length > in.size()) return std::nullopt;
      in.remove_prefix(*length);
    } else {
      return std::nullopt;
    }
  }
  return status;
}

std::string ToString(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string out;
  if (!buffer.Dump(&slices).ok()) return out;
  for (const grpc::Slice& s : slices) {
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return out;
}

struct TlsFiles {
  std::string ca_path;  // empty: plaintext
  std::string cert_path;
  std::string key_path;
  std::string server_name;  // empty: the address's host
};

std::optional<std::string> ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream text;
  text << file.rdbuf();
  if (!file) return std::nullopt;
  return text.str();
}

// The channel's credentials; nullptr (after saying which file) when a file is unreadable.
std::shared_ptr<grpc::ChannelCredentials> Credentials(const TlsFiles& tls) {
  if (tls.ca_path.empty()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  for (const auto& [path, field] : {std::pair{tls.ca_path, &ssl.pem_root_certs},
                                    std::pair{tls.cert_path, &ssl.pem_cert_chain},
                                    std::pair{tls.key_path, &ssl.pem_private_key}}) {
    if (path.empty()) continue;
    std::optional<std::string> text = ReadFile(path);
    if (!text) {
      std::cout << "error: cannot read " << path << "\n";
      return nullptr;
    }
    *field = std::move(*text);
  }
  return grpc::SslCredentials(ssl);
}

int Probe(const std::string& address, const std::string& service, double timeout_seconds,
          const TlsFiles& tls) {
  const std::shared_ptr<grpc::ChannelCredentials> credentials = Credentials(tls);
  if (credentials == nullptr) return 1;
  grpc::ChannelArguments arguments;
  if (!tls.server_name.empty()) arguments.SetSslTargetNameOverride(tls.server_name);
  const std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(address, credentials, arguments);
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000)));
  const std::string request_bytes = EncodeRequest(service);
  grpc::Slice slice(request_bytes);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, kCheckMethod, grpc::StubOptions(), &request, &response,
                 [&done](grpc::Status status) { done.set_value(std::move(status)); });
  const grpc::Status status = done.get_future().get();
  if (!status.ok()) {
    // NOT_FOUND: the server does not know `service`; UNAVAILABLE: nothing answers there.
    std::cout << "error " << status.error_code() << " from " << address << ": "
              << status.error_message() << "\n";
    return 1;
  }
  const std::optional<uint64_t> serving = DecodeStatus(ToString(response));
  if (!serving) {
    std::cout << "error: " << address << " answered with bytes that are no HealthCheckResponse\n";
    return 1;
  }
  std::cout << (*serving < std::size(kServingStatusNames) ? kServingStatusNames[*serving]
                                                          : "status " + std::to_string(*serving))
            << "\n";
  return *serving == kServing ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string address = "127.0.0.1:50051";
  std::string service;
  double timeout_seconds = 2.0;
  CLI::App app{"tokenmill-health: exit 0 when a gRPC server's health service says SERVING"};
  app.add_option("address", address, "host:port of the server")->capture_default_str();
  app.add_option("--service", service,
                 "service to ask about, e.g. tokenmill.v1.Inference (empty: the whole server)");
  app.add_option("--timeout", timeout_seconds, "seconds to wait for the answer")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  TlsFiles tls;
  CLI::Option* ca = app.add_option("--tls-ca", tls.ca_path,
                                   "PEM CA certificates: the server speaks TLS, signed by one")
                        ->check(CLI::ExistingFile);
  CLI::Option* cert = app.add_option("--tls-cert", tls.cert_path,
                                     "PEM client certificate, for a server with mutual TLS")
                          ->check(CLI::ExistingFile)
                          ->needs(ca);
  app.add_option("--tls-key", tls.key_path, "PEM private key of --tls-cert")
      ->check(CLI::ExistingFile)
      ->needs(cert);
  cert->needs(app.get_option("--tls-key"));
  app.add_option("--tls-server-name", tls.server_name,
                 "the name the server's certificate must carry (default: the address's host)")
      ->needs(ca);
  CLI11_PARSE(app, argc, argv);
  return Probe(address, service, timeout_seconds, tls);
}
