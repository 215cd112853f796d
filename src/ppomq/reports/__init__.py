"""What the CLI draws from finished runs: text tables and the comparison of two run dirs."""
