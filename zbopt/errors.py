"""The one exception type for errors a user can cause."""


class ZboptError(ValueError):
    """Bad input or impossible request; the message says what to change.

    The CLI prints it on one line and exits with status 2.
    """
