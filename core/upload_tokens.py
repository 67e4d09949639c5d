"""CDI's upload tokens, pure: a grant to upload into one claim, signed with the cluster's
upload key and short-lived (CDI's five minutes). `issue` answers an `UploadTokenRequest`;
`verify` is what the upload proxy asks of a request's bearer token: the claim it grants,
or None (forged, altered, expired, or for another operation). No state is kept: the
signature is the grant, as CDI's signed tokens are."""

from __future__ import annotations

import base64
import hashlib
import hmac

import msgspec

LIFETIME = 300.0  # seconds, CDI's token lifetime
OPERATION = "Upload"
RESOURCE = "persistentvolumeclaims"


class Grant(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    operation: str
    namespace: str
    name: str
    resource: str
    expires: float


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _sign(key: bytes, body: str) -> str:
    return _b64(hmac.new(key, f"upload/{body}".encode(), hashlib.sha256).digest())


def issue(key: bytes, namespace: str, claim: str, now: float) -> str:
    grant = Grant(OPERATION, namespace, claim, RESOURCE, now + LIFETIME)
    body = _b64(msgspec.json.encode(grant))
    return f"{body}.{_sign(key, body)}"


def verify(key: bytes, token: str, now: float) -> Grant | None:
    body, _, signature = token.strip().partition(".")
    if not body or not signature or not hmac.compare_digest(_sign(key, body), signature):
        return None
    try:
        grant = msgspec.json.decode(_unb64(body), type=Grant)
    except (ValueError, msgspec.DecodeError):
        return None
    if grant.operation != OPERATION or grant.resource != RESOURCE or not grant.name:
        return None
    return grant if now < grant.expires else None
