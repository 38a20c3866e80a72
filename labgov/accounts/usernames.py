"""Usernames people can tell apart: NFKC-normalized, and never a look-alike of another.

"аda" with a Cyrillic "а" reads as "ada" on every page, in every approval and audit row. A
username's skeleton folds case, compatibility forms (NFKC), accents and the Cyrillic and Greek
letters (and digits) that look like Latin ones; two people never share a skeleton. A sign-in
makes an ASCII username from what the provider calls the person, and one whose skeleton is
taken gets a number."""

import re
import unicodedata

from django.contrib.auth import get_user_model

# Letters drawn like Latin ones (Unicode's confusables for the scripts a username meets most).
_LOOK_ALIKES = str.maketrans(
    {
        **dict.fromkeys("аɑα", "a"),
        **dict.fromkeys("вβ", "b"),
        **dict.fromkeys("сϲ", "c"),
        **dict.fromkeys("ԁ", "d"),
        **dict.fromkeys("еёε", "e"),
        **dict.fromkeys("һн", "h"),
        **dict.fromkeys("іїιı", "i"),
        **dict.fromkeys("јϳ", "j"),
        **dict.fromkeys("кκ", "k"),
        **dict.fromkeys("м", "m"),
        **dict.fromkeys("пη", "n"),
        **dict.fromkeys("оοσ", "o"),
        **dict.fromkeys("рρ", "p"),
        **dict.fromkeys("ԛ", "q"),
        **dict.fromkeys("ѕ", "s"),
        **dict.fromkeys("тτ", "t"),
        **dict.fromkeys("υ", "u"),
        **dict.fromkeys("ν", "v"),
        **dict.fromkeys("ԝω", "w"),
        **dict.fromkeys("хχ", "x"),
        **dict.fromkeys("уγ", "y"),
        **dict.fromkeys("ζ", "z"),
    }
)
# Digits and marks that pass for letters, in a skeleton.
_PASS_FOR_LETTERS = str.maketrans({"0": "o", "1": "l", "|": "l", "5": "s"})
_UNSAFE = re.compile(r"[^A-Za-z0-9.@+_-]")


def skeleton(username: str) -> str:
    """What a username looks like: two usernames with one skeleton cannot be told apart."""
    text = unicodedata.normalize("NFKC", username).casefold()
    text = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    text = text.translate(_LOOK_ALIKES).translate(_PASS_FOR_LETTERS)
    text = text.replace("i", "l").replace("rn", "m")
    return text.replace("_", "-")


def _usernames(exclude_pk=None):
    # The user model through Django's setting: models.User.clean() calls this module.
    return (
        get_user_model()
        .objects.exclude(pk=exclude_pk)
        .values_list("username", flat=True)
        .iterator()
    )


def look_alike_of(username: str, *, exclude_pk=None) -> str | None:
    """Another person's username that looks like this one, if any (one pass over them)."""
    wanted = skeleton(username)
    return next((name for name in _usernames(exclude_pk) if skeleton(name) == wanted), None)


def free_username(base: str) -> str:
    """`base`, or `base-2`, `base-3`, … : the first that looks like nobody's (one pass over
    the usernames, however many numbers it tries)."""
    taken = {skeleton(name) for name in _usernames()}
    candidate, n = base, 1
    while skeleton(candidate) in taken:
        n += 1
        candidate = f"{base}-{n}"
    return candidate


def ascii_username(wanted: str, fallback: str = "person") -> str:
    """An ASCII username from what a provider calls a person (accents dropped, other letters
    left out, look-alikes of Latin letters written as those)."""
    text = unicodedata.normalize("NFKD", unicodedata.normalize("NFKC", wanted or ""))
    text = "".join(c for c in text if not unicodedata.combining(c)).translate(_LOOK_ALIKES)
    return _UNSAFE.sub("", text)[:140] or fallback
