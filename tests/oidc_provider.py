"""A small OpenID Connect provider for the sign-in tests: a real HTTP server on loopback that
speaks the authorization-code flow (with PKCE), signs ID tokens with its own RSA key and
publishes it as a JWKS. Tests set the claims of the next sign-in and, to attack labgov, what
to get wrong (expired token, another key, another audience, a refused code...)."""

import base64
import hashlib
import json
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlencode, urlsplit

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

CLIENT_ID = "labgov-test"
CLIENT_SECRET = "s3cret-for-tests"  # noqa: S105 (a test provider's secret)


class StandInProvider:
    def __init__(self):
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.codes: dict[str, dict] = {}
        self.access_tokens: dict[str, dict] = {}
        self.next_claims: dict = {}
        self.tamper: dict = {}
        self.refuse_codes = False
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.issuer = f"http://127.0.0.1:{self._server.server_port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self):
        self._server.shutdown()
        self._server.server_close()

    def settings(self) -> dict:
        return {
            "LABGOV_OIDC_ENABLED": True,
            "LABGOV_OIDC_CLIENT_ID": CLIENT_ID,
            "LABGOV_OIDC_ISSUER": self.issuer,
            "OIDC_RP_CLIENT_ID": CLIENT_ID,
            "OIDC_RP_CLIENT_SECRET": CLIENT_SECRET,
            "OIDC_OP_AUTHORIZATION_ENDPOINT": f"{self.issuer}/authorize",
            "OIDC_OP_TOKEN_ENDPOINT": f"{self.issuer}/token",
            "OIDC_OP_USER_ENDPOINT": f"{self.issuer}/userinfo",
            "OIDC_OP_JWKS_ENDPOINT": f"{self.issuer}/jwks",
        }

    def id_token(self, claims: dict, nonce: str) -> str:
        now = int(time.time())
        payload = {
            "iss": self.issuer,
            "aud": CLIENT_ID,
            "iat": now,
            "exp": now + 300,
            "nonce": nonce,
            **claims,
            **self.tamper.get("id_token", {}),
        }
        key = self.other_key if self.tamper.get("sign_with_other_key") else self.key
        headers = {} if self.tamper.get("no_kid") else {"kid": self.tamper.get("kid", "k1")}
        return jwt.encode(payload, key, algorithm="RS256", headers=headers)

    def _handler(self):
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _json(self, status, body):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                url = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                if url.path == "/authorize":
                    if query.get("client_id") != CLIENT_ID:
                        return self._json(400, {"error": "unauthorized_client"})
                    code = secrets.token_urlsafe(16)
                    provider.codes[code] = {
                        "claims": dict(provider.next_claims),
                        "nonce": query.get("nonce"),
                        "redirect_uri": query["redirect_uri"],
                        "challenge": query.get("code_challenge"),
                    }
                    target = (
                        query["redirect_uri"]
                        + "?"
                        + urlencode({"code": code, "state": query["state"]})
                    )
                    self.send_response(302)
                    self.send_header("Location", target)
                    self.end_headers()
                    return None
                if url.path == "/userinfo":
                    token = self.headers.get("Authorization", "").removeprefix("Bearer ")
                    claims = provider.access_tokens.get(token)
                    if claims is None:
                        return self._json(401, {"error": "invalid_token"})
                    return self._json(200, {**claims, **provider.tamper.get("userinfo", {})})
                if url.path == "/jwks":
                    jwk = jwt.algorithms.RSAAlgorithm.to_jwk(
                        provider.key.public_key(), as_dict=True
                    )
                    return self._json(200, {"keys": [{**jwk, "kid": "k1", "alg": "RS256"}]})
                return self._json(404, {"error": "not_found"})

            def do_POST(self):
                if urlsplit(self.path).path != "/token":
                    return self._json(404, {"error": "not_found"})
                length = int(self.headers.get("Content-Length", "0"))
                form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
                if form.get("client_id") != CLIENT_ID or form.get("client_secret") != CLIENT_SECRET:
                    return self._json(401, {"error": "invalid_client"})
                grant = provider.codes.pop(form.get("code", ""), None)  # a code is used once
                if grant is None or provider.refuse_codes:
                    return self._json(400, {"error": "invalid_grant"})
                verifier = form.get("code_verifier", "")
                challenge = (
                    base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
                    .rstrip(b"=")
                    .decode()
                )
                if (
                    grant["redirect_uri"] != form.get("redirect_uri")
                    or challenge != grant["challenge"]
                ):
                    return self._json(400, {"error": "invalid_grant"})
                access = secrets.token_urlsafe(16)
                provider.access_tokens[access] = grant["claims"]
                return self._json(
                    200,
                    {
                        "access_token": access,
                        "token_type": "Bearer",
                        "expires_in": 300,
                        "id_token": provider.id_token(grant["claims"], grant["nonce"]),
                    },
                )

        return Handler
