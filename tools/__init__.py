"""Developer tools that read the source tree (not part of the installed package)."""
