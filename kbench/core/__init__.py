"""The foundation: errors, the version and safe output writing; imports nothing else of kbench."""
