#include "server/grpc/server_credentials.h"

#include <grpcpp/security/server_credentials.h>
#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <fstream>
#include <sstream>
#include <string>

namespace tokenmill::server {
namespace {

// The file's text when it holds a PEM block; `flag` names it in the error.
StatusOr<std::string> ReadPem(const std::string& path, const std::string& flag) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream text;
  text << file.rdbuf();
  if (!file) return InvalidArgumentError(flag + " " + path + ": cannot read the file");
  if (text.str().find("-----BEGIN ") == std::string::npos) {
    return InvalidArgumentError(flag + " " + path + ": no PEM block (-----BEGIN ...) in it");
  }
  return text.str();
}

// The first certificate of `cert_pem` is the one `key_pem` signs for. gRPC checks this only
// when it binds a port itself; the server's own listener (grpc_listener.h) hands it sockets
// instead, and a wrong pair would fail every handshake rather than the start.
bool KeyMatchesCertificate(const std::string& cert_pem, const std::string& key_pem) {
  BIO* cert_bio = BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size()));
  BIO* key_bio = BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size()));
  X509* cert = cert_bio != nullptr ? PEM_read_bio_X509(cert_bio, nullptr, nullptr, nullptr)
                                   : nullptr;
  EVP_PKEY* key = key_bio != nullptr
                      ? PEM_read_bio_PrivateKey(key_bio, nullptr, nullptr, nullptr)
                      : nullptr;
  const bool matches = cert != nullptr && key != nullptr && X509_check_private_key(cert, key) == 1;
  EVP_PKEY_free(key);
  X509_free(cert);
  BIO_free(key_bio);
  BIO_free(cert_bio);
  return matches;
}

}  // namespace

StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerOptions& o) {
  const bool tls = !o.tls_cert_path.empty() || !o.tls_key_path.empty();
  if (!tls) {
    if (!o.tls_client_ca_path.empty()) {
      return InvalidArgumentError("--tls-client-ca needs --tls-cert and --tls-key (mTLS is TLS "
                                  "with client certificates)");
    }
    return grpc::InsecureServerCredentials();
  }
  if (o.tls_cert_path.empty() || o.tls_key_path.empty()) {
    return InvalidArgumentError("TLS needs both --tls-cert and --tls-key");
  }
  StatusOr<std::string> cert = ReadPem(o.tls_cert_path, "--tls-cert");
  if (!cert.ok()) return cert.status();
  StatusOr<std::string> key = ReadPem(o.tls_key_path, "--tls-key");
  if (!key.ok()) return key.status();
  if (!KeyMatchesCertificate(*cert, *key)) {
    return InvalidArgumentError("--tls-key is not the key of --tls-cert (" + o.tls_key_path +
                                ", " + o.tls_cert_path + "), or one of them does not parse");
  }
  grpc::SslServerCredentialsOptions ssl(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  ssl.pem_key_cert_pairs.push_back({*key, *cert});
  if (!o.tls_client_ca_path.empty()) {
    StatusOr<std::string> ca = ReadPem(o.tls_client_ca_path, "--tls-client-ca");
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *ca;
    ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(ssl);
}

}  // namespace tokenmill::server
