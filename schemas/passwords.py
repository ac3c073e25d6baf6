"""Passwords, stored salted and hashed with a standard KDF: scrypt (RFC 7914, ``hashlib.scrypt``).

A stored hash is one string holding everything needed to verify a password against it:
``scrypt$<n>$<r>$<p>$<salt, base64>$<derived key, base64>``, with a random 16-byte salt per
hash. The parameters travel with the hash, so raising them later (:data:`SCRYPT_N`) leaves older
hashes verifiable. :func:`verify_password` recomputes the key with the stored salt and
parameters and compares in constant time (``hmac.compare_digest``); a malformed hash verifies
nothing. Hashing costs tens of milliseconds and 16 MiB on purpose: callers that check a password
per request cache what they verified (``agents/proxy/access.py``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os

SCHEME = "scrypt"
SCRYPT_N = 2**14  # CPU/memory cost (16 MiB with r=8)
SCRYPT_R = 8
SCRYPT_P = 1
SALT_BYTES = 16
KEY_BYTES = 32
MAX_N = 2**18  # a stored hash asking for more is refused (256 MiB at r=8)
_MAXMEM = 2**29  # hashlib's memory bound (512 MiB): room for any accepted n at r=8


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _derive(password: str, salt: bytes, n: int, r: int, p: int, size: int) -> bytes:
    return hashlib.scrypt(
        password.encode("utf-8", "surrogatepass"), salt=salt, n=n, r=r, p=p, dklen=size, maxmem=_MAXMEM
    )


def hash_password(password: str, *, n: int = SCRYPT_N, r: int = SCRYPT_R, p: int = SCRYPT_P) -> str:
    """The stored form of ``password``: a fresh random salt, scrypt with ``n``, ``r``, ``p``."""
    salt = os.urandom(SALT_BYTES)
    key = _derive(password, salt, n, r, p, KEY_BYTES)
    return f"{SCHEME}${n}${r}${p}${_b64(salt)}${_b64(key)}"


def verify_password(password: str, stored: str) -> bool:
    """Whether ``password`` is the one ``stored`` (a :func:`hash_password` string) was made from;
    False for a malformed ``stored``, never an exception."""
    try:
        scheme, n_text, r_text, p_text, salt_text, key_text = stored.split("$")
        n, r, p = int(n_text), int(r_text), int(p_text)
        salt, key = base64.b64decode(salt_text, validate=True), base64.b64decode(key_text, validate=True)
    except (ValueError, binascii.Error):
        return False
    if scheme != SCHEME or not 1 < n <= MAX_N or n & (n - 1) or not 1 <= r <= SCRYPT_R or not 1 <= p <= 16 or not key:
        return False
    try:
        derived = _derive(password, salt, n, r, p, len(key))
    except (ValueError, MemoryError):
        return False
    return hmac.compare_digest(derived, key)


__all__ = ["hash_password", "verify_password"]
