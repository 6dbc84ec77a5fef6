"""The Bucketing tab: `tab` (bucket lists, padding, the best layout), `charts`, `padding_demo` (the padding bug
made on purpose, on the CPU)."""
