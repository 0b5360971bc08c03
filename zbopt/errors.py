"""The one exception type for errors a user can cause, and how another library's exception is
shown in one of its one-line messages."""


class ZboptError(ValueError):
    """Bad input or impossible request; the message says what to change.

    The CLI prints it on one line and exits with status 2.
    """


def first_line(err: BaseException) -> str:
    """The first non-blank line of `err`'s message, stripped; "" when it has none."""
    return next((line.strip() for line in str(err).splitlines() if line.strip()), "")


def reason(err: BaseException) -> str:
    """`err`'s first message line, or its type's name when it has no message."""
    return first_line(err) or type(err).__name__


def escaped(text: str) -> str:
    """`text` with its unprintable characters (control characters, line breaks, lone
    surrogates) written as Python escapes, so that it fits on one line of a comment or message."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def described(err: BaseException) -> str:
    """`err`'s type and first message line ("KeyError: 'x'"), or the type alone."""
    line = first_line(err)
    return f"{type(err).__name__}: {line}" if line else type(err).__name__
