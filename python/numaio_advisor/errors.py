"""The one error type the command line turns into a message and a non-zero exit."""


class AdviceError(Exception):
    """Bad input or an unusable corpus: the message says what and what to do."""
