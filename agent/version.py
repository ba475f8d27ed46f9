"""The one place the version is written: the package, the build (pyproject) and the agent's ping read it."""

__version__ = "0.1.0"
