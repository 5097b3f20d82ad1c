"""The one error type for bad user input: command lines print its message on one line and exit 2."""


class UsageError(Exception):
    """Bad input (unknown model, bad config key, missing weights, bad grid, ...): exit code 2."""
