"""lockguard: catch silent training drift when an ML stack's lock changes."""

__version__ = "0.1.0"
