"""User-facing errors: one line naming what is wrong and what is allowed."""


class MoesimError(Exception):
    """Base class for errors caused by user input; the CLI prints them as one line."""


class SpecError(MoesimError):
    """A spec file, flag or combination is invalid."""


class ConfigError(MoesimError):
    """A deployment configuration is invalid (divisibility, ranges)."""


class CalibrationError(MoesimError):
    """A calibration CSV or profile is invalid or does not match."""
