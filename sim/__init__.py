"""Timeline simulator of one LLM decode step (numpy only)."""
