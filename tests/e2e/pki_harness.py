"""A throwaway public-key infrastructure made with openssl for the TLS tests: two CAs, a server
certificate for localhost / 127.0.0.1 and client certificates, one signed by each CA."""
import subprocess

from process_harness import EXIT_TIMEOUT_S


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True,
                   timeout=EXIT_TIMEOUT_S)


def make_ca(folder, name):
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-subj", f"/CN={name}", "-keyout", f"{name}.key", "-out", f"{name}.crt", cwd=folder)


def make_cert(folder, name, ca, extensions):
    """A certificate for `name` signed by the CA `ca`, with the given x509v3 extensions."""
    (folder / f"{name}.ext").write_text(extensions)
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
            "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=folder)
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
            "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.crt",
            cwd=folder)


def make_pki(folder):
    """ca and other-ca; server (by ca), client (by ca) and stranger (by other-ca): each a .crt
    and a .key in `folder`."""
    make_ca(folder, "ca")
    make_ca(folder, "other-ca")
    make_cert(folder, "server", "ca", "subjectAltName=DNS:localhost,IP:127.0.0.1\n"
                                      "extendedKeyUsage=serverAuth\n")
    make_cert(folder, "client", "ca", "extendedKeyUsage=clientAuth\n")
    make_cert(folder, "stranger", "other-ca", "extendedKeyUsage=clientAuth\n")
    return folder
