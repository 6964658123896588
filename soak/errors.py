"""The one family of errors the library raises; only the CLI turns them into messages and exit codes."""

EXIT_PASS = 0
EXIT_FAIL = 1
EXIT_USAGE = 2
EXIT_INCONCLUSIVE = 3
EXIT_INTERNAL = 4
EXIT_FORCED = 130


class SoakError(Exception):
    """Base of every error soak raises on purpose; carries the exit code the CLI should use."""

    exit_code = EXIT_INTERNAL


class ConfigError(SoakError):
    """A flag, environment variable or config file value is wrong."""

    exit_code = EXIT_USAGE


class TargetError(SoakError):
    """The server could not be started, reached or identified before load began."""

    exit_code = EXIT_USAGE


class UnknownRunError(SoakError):
    """A run id that the database does not hold."""

    exit_code = EXIT_USAGE


class MissingDatabaseError(ConfigError):
    """A reading command was pointed at a database that does not exist (reading never creates one)."""


class StorageError(SoakError):
    """The database could not be written or read."""

    exit_code = EXIT_INTERNAL


class ToolError(SoakError):
    """A program soak calls on (Chromium, for `soak report --pdf`) is missing or failed."""

    exit_code = EXIT_USAGE
