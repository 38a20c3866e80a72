"""Encryption of secrets at rest (Runpod API keys) with the keys in LABGOV_ENCRYPTION_KEYS."""

from functools import cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings


class SecretUnreadable(Exception):
    """The stored secret was encrypted with a key that is no longer configured."""


@cache
def _fernet(keys: tuple[str, ...]) -> MultiFernet:
    return MultiFernet([Fernet(key.encode()) for key in keys])


def encrypt(plaintext: str) -> str:
    return _fernet(tuple(settings.ENCRYPTION_KEYS)).encrypt(plaintext.encode()).decode()


def decrypt(token: str) -> str:
    try:
        return _fernet(tuple(settings.ENCRYPTION_KEYS)).decrypt(token.encode()).decode()
    except InvalidToken:
        raise SecretUnreadable(
            "A stored secret cannot be decrypted: LABGOV_ENCRYPTION_KEYS no longer holds the key "
            "it was encrypted with. Enter the secret again."
        ) from None
