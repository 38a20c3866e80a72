"""One TLS context per process for outgoing HTTPS (Runpod's API, lab webhooks)."""

import functools
import ssl

import httpx


@functools.cache
def default_context() -> ssl.SSLContext:
    """httpx's default trust: certifi's roots, or SSL_CERT_FILE / SSL_CERT_DIR when the
    environment names them. httpx makes this for every client it creates, which reads and
    parses the whole CA bundle (about 0.1 s, on every sync and every provisioning call);
    a context is safe to share between threads, so it is made once."""
    return httpx.create_ssl_context()
